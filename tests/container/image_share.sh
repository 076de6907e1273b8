# shellcheck shell=bash
# Runs a share inside the share-manager image and talks to it from the host.
# Sourced by tests/container/image_test.sh and bench/container_cold_start.sh.
#
# The share runs under `buildah run --isolation chroot` (no Docker daemon
# here) on the host's loopback, as PID 1 of its own PID namespace like in a
# pod, with the capabilities a Kubernetes container has by default plus the
# ones the pod template adds (deploy/base/share-manager-pod.yaml; this
# machine itself lacks CAP_SYS_RESOURCE, so that one is left out).
#
# Callers set: STORAGE (buildah/podman storage flags, array), HOST_SM (the
# host's share-manager binary, used as the gRPC client).

IMAGE_CAPS=(
  --cap-add CAP_SYS_ADMIN --cap-add CAP_DAC_READ_SEARCH
  --cap-add CAP_CHOWN --cap-add CAP_DAC_OVERRIDE --cap-add CAP_FOWNER --cap-add CAP_FSETID
  --cap-add CAP_SETUID --cap-add CAP_SETGID
)

# now_ms: CLOCK_BOOTTIME in milliseconds (the clock /proc/PID/stat uses too).
now_ms() {
  local up
  read -r up _ </proc/uptime
  echo $((${up/./} * 10))
}

# free_port: a TCP port nobody listens on in 20000-39999 (never 2049/9600).
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 20000))
    ss -Htln "sport = :$port" | grep -q . || { echo "$port"; return; }
  done
}

# Extra `buildah run` arguments, e.g. (-v HOST_DIR:/etc/share-manager/tls:ro)
# for the TLS files a Kubernetes Secret mounts in a pod.
IMAGE_SHARE_RUN_ARGS=()

# image_share_start CONTAINER VOLUME NFS_PORT GRPC_PORT LOG [FLAG...]: starts
# the share (exporting /export/VOLUME; extra daemon flags such as --device
# appended) in the background, its plaintext health port (what kubelet
# probes) on a free port of its own; sets IMAGE_SHARE_RUNNER (the buildah run
# PID), IMAGE_SHARE_HEALTH_PORT and IMAGE_SHARE_STARTED_MS.
image_share_start() {
  local ctr=$1 volume=$2 nfs_port=$3 grpc_port=$4 log=$5
  shift 5
  IMAGE_SHARE_HEALTH_PORT=$(free_port)
  IMAGE_SHARE_STARTED_MS=$(now_ms)
  buildah "${STORAGE[@]}" run --isolation chroot "${IMAGE_CAPS[@]}" "${IMAGE_SHARE_RUN_ARGS[@]}" \
    "$ctr" -- unshare --pid --fork --mount-proc \
    /usr/local/bin/share-manager daemon --volume "$volume" --export-dir "/export/$volume" \
    --nfs-address 127.0.0.1 --nfs-port "$nfs_port" --listen "127.0.0.1:$grpc_port" \
    --health-listen "127.0.0.1:$IMAGE_SHARE_HEALTH_PORT" \
    --grace-period 2 --lease-lifetime 2 "$@" >"$log" 2>&1 &
  IMAGE_SHARE_RUNNER=$!
}

# image_share_probe SERVICE: grpc.health.v1 on the share's health port, as
# kubelet's gRPC probe asks it (plaintext, whatever the API port speaks).
image_share_probe() {
  "$HOST_SM" probe --addr "127.0.0.1:$IMAGE_SHARE_HEALTH_PORT" --service "$1" --timeout 1s
}

# image_share_wait_serving TIMEOUT_S: polls readiness until SERVING; prints
# the milliseconds since image_share_start. Fails on timeout or when the
# runner exits first.
image_share_wait_serving() {
  local deadline=$(($(now_ms) + $1 * 1000))
  while (($(now_ms) < deadline)); do
    if image_share_probe readiness >/dev/null 2>&1; then
      echo $(($(now_ms) - IMAGE_SHARE_STARTED_MS))
      return 0
    fi
    kill -0 "$IMAGE_SHARE_RUNNER" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# image_share_pid GRPC_PORT: host PID of the in-image share-manager serving
# that port (its command line names the port; unshare and buildah are not
# named share-manager).
image_share_pid() {
  local pid
  for pid in $(pgrep -x share-manager); do
    grep -qF -- "127.0.0.1:$1" "/proc/$pid/cmdline" 2>/dev/null && { echo "$pid"; return 0; }
  done
  return 1
}

# process_start_ms PID: when that process was exec'd, CLOCK_BOOTTIME ms.
process_start_ms() {
  local stat ticks
  stat=$(<"/proc/$1/stat")
  stat=${stat##*) }
  ticks=$(awk '{print $20}' <<<"$stat")
  echo $((ticks * 1000 / $(getconf CLK_TCK)))
}

# running PID: the process exists and has not exited (a zombie has).
running() {
  local stat
  # cat, not $(<file): a process that exits during the read makes the
  # builtin's read fail in a way that ends a `set -e` shell.
  [[ -n $1 ]] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# image_share_stop GRPC_PORT [TIMEOUT_S]: SIGTERM to share-manager, as the
# kubelet does, then waits for the runner at most TIMEOUT_S (default 60, above
# the pod's 45 s termination grace); sets IMAGE_SHARE_EXIT to the runner's
# exit code, or to 124 when it did not stop in time and was killed. (Not in a
# subshell: only this shell can wait for the runner.)
# shellcheck disable=SC2034 # IMAGE_SHARE_EXIT is read by the callers
image_share_stop() {
  local pid timeout_s=${2:-60} deadline
  deadline=$(($(now_ms) + timeout_s * 1000))
  pid=$(image_share_pid "$1") && kill -TERM "$pid"
  while running "$IMAGE_SHARE_RUNNER" && (($(now_ms) < deadline)); do
    sleep 0.05
  done
  if running "$IMAGE_SHARE_RUNNER"; then
    echo "share-manager did not stop within $timeout_s s of SIGTERM: killing it" >&2
    image_share_kill "$1"
    IMAGE_SHARE_EXIT=124
    return
  fi
  IMAGE_SHARE_EXIT=0
  wait "$IMAGE_SHARE_RUNNER" || IMAGE_SHARE_EXIT=$? # exited already: returns at once
  IMAGE_SHARE_RUNNER=
}

# image_share_kill GRPC_PORT: cleanup after a failure; ends the share and
# ganesha whatever state they are in.
image_share_kill() {
  local pid
  if pid=$(image_share_pid "$1"); then
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  fi
  if [[ -n ${IMAGE_SHARE_RUNNER:-} ]]; then
    kill -KILL "$IMAGE_SHARE_RUNNER" 2>/dev/null || true
    local deadline=$(($(now_ms) + 10000)) # SIGKILLed: gone at once, unless stuck in the kernel
    while running "$IMAGE_SHARE_RUNNER" && (($(now_ms) < deadline)); do sleep 0.05; done
    running "$IMAGE_SHARE_RUNNER" || wait "$IMAGE_SHARE_RUNNER" 2>/dev/null || true
    IMAGE_SHARE_RUNNER=
  fi
}
