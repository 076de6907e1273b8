#!/usr/bin/env bash
# The share-manager image, end to end: builds it from a clean checkout of
# HEAD with container/build.sh, reports its size, checks what it contains
# (no compiler, no apt lists, the entrypoint), then runs a real share inside
# it (the image's own ganesha, host loopback, non-standard ports) and checks
# from the host: readiness and liveness SERVING through grpc.health.v1 on its
# plaintext health port, the API over mutual TLS only (certificates made here
# with openssl, mounted where the pod's Secret is), an
# NFS write and read through libnfs, the bytes in the image's export
# directory, orphans reaped by share-manager as PID 1, a SIGKILLed ganesha
# restarted in place, and a clean exit 0 on SIGTERM; then the same for an ext4
# loop device checked, mounted and exported by the image's own tools. Leaves no
# container, image, process, loop device or temporary file behind.
#
# Usage: tests/container/image_test.sh HOST_SHARE_MANAGER   (root; ctest label "container")
#   SHARE_MANAGER_IMAGE=TAG tests/container/image_test.sh ...  tests an image
#   already built (kept afterwards) instead of building one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
HOST_SM=$(realpath "${1:?usage: image_test.sh HOST_SHARE_MANAGER}")
STORAGE=(--storage-driver vfs)
source "$repo/tests/container/checks.sh"
source "$repo/tests/container/image_share.sh"

work=$(mktemp -d /tmp/share-manager-image-test.XXXXXX)
tag=${SHARE_MANAGER_IMAGE:-localhost/share-manager:test-$$}
volume=image-test
nfs_port=$(free_port)
grpc_port=$(free_port)
ctr=
loop_dev=

cleanup() {
  image_share_kill "$grpc_port"
  [[ -z $loop_dev ]] || losetup -d "$loop_dev" 2>/dev/null || true
  [[ -z $ctr ]] || buildah "${STORAGE[@]}" rm "$ctr" >/dev/null 2>&1 || true
  [[ -n ${SHARE_MANAGER_IMAGE:-} ]] || podman "${STORAGE[@]}" rmi "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM # so that cleanup runs when interrupted too

in_image() { buildah "${STORAGE[@]}" run --isolation chroot "$ctr" -- "$@"; }
eventually() { # eventually SECONDS COMMAND...: retries every 50 ms until it succeeds
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  until "$@"; do
    (($(now_ms) < deadline)) || return 1
    sleep 0.05
  done
}
# serve LOG [FLAG...]: starts the share ($volume, $nfs_port, $grpc_port) in the
# image; the test ends here unless readiness is SERVING within 60 s.
serve() {
  local log=$1
  shift
  image_share_start "$ctr" "$volume" "$nfs_port" "$grpc_port" "$log" "$@"
  local cold_ms
  if cold_ms=$(image_share_wait_serving 60); then
    pass "readiness SERVING ${cold_ms} ms after buildah run"
  else
    fail "readiness SERVING within 60 s"
    tail -n 40 "$log"
    exit 1
  fi
}
stop_cleanly() { # SIGTERM, as the kubelet sends it
  image_share_stop "$grpc_port"
  check "SIGTERM stops share-manager with exit code 0 (got $IMAGE_SHARE_EXIT)" \
    test "$IMAGE_SHARE_EXIT" = 0
}

image_under_test "${SHARE_MANAGER_IMAGE:-}" "$tag" "$tag"

ctr=$(buildah "${STORAGE[@]}" from --pull=never "$tag")
entrypoint=$(podman "${STORAGE[@]}" image inspect "$tag" --format '{{json .Config.Entrypoint}}')
check "entrypoint is share-manager (PID 1 in the pod): $entrypoint" \
  test "$entrypoint" = '["/usr/local/bin/share-manager"]'
version=$(in_image share-manager --version)
check "share-manager --version in the image: $version" \
  test "$version" = "$("$HOST_SM" --version)"
# shellcheck disable=SC2016 # expanded by the shell inside the image
found=$(in_image sh -c 'for t in cc gcc g++ c++ cpp clang clang++ ld as make; do command -v "$t"; done
  dpkg-query -W -f="\${db:Status-Status} \${Package}\n" gcc g++ cpp binutils libc6-dev 2>/dev/null |
    sed -n "s/^installed //p"')
check "no compiler, linker or C headers in the image${found:+ (found: $found)}" test -z "$found"
lists=$(in_image find /var/lib/apt/lists /var/cache/apt -type f)
check "no apt lists or caches${lists:+ (found: $lists)}" test -z "$lists"
check "the image has ganesha and its VFS plugin" \
  in_image test -x /usr/bin/ganesha.nfsd -a -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so

# Mutual TLS as in the pod: the server's files where the Secret is mounted
# (tls.crt, tls.key, ca.crt), the client's (the controller's) on the host.
make_cert() { # make_cert DIR CN SAN: DIR/tls.{key,crt} signed by $work/ca, DIR/ca.crt
  mkdir -p "$1"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1/tls.key" \
    -out "$1/tls.csr" -subj "/CN=$2" 2>/dev/null
  printf 'extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$3" >"$1/ext"
  openssl x509 -req -in "$1/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -days 2 \
    -set_serial "$RANDOM" -extfile "$1/ext" -out "$1/tls.crt" 2>/dev/null
  cp "$work/ca.crt" "$1/ca.crt"
  rm "$1/tls.csr" "$1/ext"
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" \
  -out "$work/ca.crt" -days 2 -subj /CN=image-test-ca 2>/dev/null
make_cert "$work/server-tls" share-manager DNS:share-manager
make_cert "$work/client-tls" share-controller DNS:share-controller
IMAGE_SHARE_RUN_ARGS=(-v "$work/server-tls:/etc/share-manager/tls:ro")
tls_flags=(--tls-dir /etc/share-manager/tls --tls-allowed-client share-controller)
as_controller=(--tls-dir "$work/client-tls" --tls-server-name share-manager)

echo "== a share inside the image (NFS 127.0.0.1:$nfs_port, gRPC 127.0.0.1:$grpc_port, mTLS)"
serve "$work/share.log" "${tls_flags[@]}"
check "status over mutual TLS with the controller's certificate" \
  "$HOST_SM" status --addr "127.0.0.1:$grpc_port" "${as_controller[@]}"
no_plaintext() { ! "$HOST_SM" status --addr "127.0.0.1:$grpc_port" --timeout 2s >/dev/null 2>&1; }
check "the API port refuses a plaintext client" no_plaintext
check "liveness SERVING (plaintext health port)" image_share_probe liveness
sm_pid=$(image_share_pid "$grpc_port")
check "share-manager is PID 1 of its PID namespace" \
  grep -qE "^NSpid:\s+$sm_pid\s+1$" "/proc/$sm_pid/status"
ganesha_pid=$(pgrep -P "$sm_pid" -x ganesha.nfsd)
root=$(buildah "${STORAGE[@]}" mount "$ctr")
check "ganesha is the image's own binary" \
  test "$(stat -L -c %d:%i "/proc/$ganesha_pid/exe")" = "$(stat -c %d:%i "$root/usr/bin/ganesha.nfsd")"

head -c 3000 /dev/urandom >"$work/payload"
url="nfs://127.0.0.1/$volume/from-host.bin?version=4&nfsport=$nfs_port"
# Retried for up to 10 s: a (re)started server refuses OPEN during NFS grace.
# Each attempt bounded: a server that hangs must fail the check, not the run.
nfs_write() { eventually 10 timeout 5 nfs-cp "$work/payload" "$url" >/dev/null 2>&1; }
nfs_read() { timeout 5 nfs-cat "$url" >"$work/read" 2>/dev/null; } # each attempt starts the file afresh
nfs_read_back() { eventually 10 nfs_read && cmp -s "$work/payload" "$work/read"; }
check "NFS write from the host ($url)" nfs_write
check "NFS read from the host returns the same bytes" nfs_read_back
check "the bytes are in the image's export directory" \
  cmp -s "$work/payload" "$root/export/$volume/from-host.bin"

# As PID 1, share-manager inherits every orphan in the pod and must reap it.
nsenter -t "$sm_pid" -p -- sh -c 'sleep 1.5 & exit 0'
orphan=$(pgrep -x -f "sleep 1.5" | head -n 1)
check "an orphan in the pod is re-parented to share-manager" \
  test "$(awk '{print $4}' "/proc/$orphan/stat" 2>/dev/null)" = "$sm_pid"
gone() { [[ ! -e /proc/$1 ]]; } # a zombie would still be there
check "share-manager reaps it when it exits" eventually 5 gone "$orphan"

# A crashed ganesha is restarted in place, inside the image too.
kill -KILL "$ganesha_pid"
restarted() {
  local pid
  pid=$(pgrep -P "$sm_pid" -x ganesha.nfsd || true)
  [[ -n $pid && $pid != "$ganesha_pid" ]] &&
    image_share_probe readiness >/dev/null 2>&1
}
check "after SIGKILL, ganesha is restarted in place and readiness is SERVING again" \
  eventually 10 restarted
check "the file reads back through NFS after the restart (NFS grace waited out)" nfs_read_back
ganesha_pid=$(pgrep -P "$sm_pid" -x ganesha.nfsd)
buildah "${STORAGE[@]}" unmount "$ctr" >/dev/null

stop_cleanly
check "ganesha is gone after the stop" test ! -e "/proc/$ganesha_pid"
check "share-manager logged its stop" grep -q "stopped" "$work/share.log"
((failures == 0)) || tail -n 30 "$work/share.log"

echo "== a block-device share inside the image (ext4 on a loop device, as in a pod)"
truncate -s 64M "$work/volume.img"
mkfs.ext4 -q -F "$work/volume.img"
loop_dev=$(losetup -f --show "$work/volume.img")
volume=image-block
grpc_port=$(free_port)
nfs_port=$(free_port)
serve "$work/block.log" --device "$loop_dev" "${tls_flags[@]}"
check "the image's e2fsck checked the device before the mount" \
  grep -q "running e2fsck -p $loop_dev" "$work/block.log"
url="nfs://127.0.0.1/$volume/on-device.bin?version=4&nfsport=$nfs_port"
check "NFS write from the host ($url)" nfs_write
stop_cleanly
check "share-manager unmounted the device on its way out" \
  grep -q "unmounted /export/$volume" "$work/block.log"
check "the bytes are on the device's ext4" \
  cmp -s "$work/payload" <(debugfs -R "cat /on-device.bin" "$loop_dev" 2>/dev/null)
((failures == 0)) || tail -n 30 "$work/block.log"

echo "$failures failed"
((failures == 0))
