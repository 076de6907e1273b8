#!/usr/bin/env bash
# The shipped share-manager pod (container/k8s/) on a real kubelet: probed by
# kubelet's own gRPC probes, its block volume mapped in by kubelet, NFS through
# the Service that kube-proxy programs, and every fault a node sees.
#
# Usage: tests/k8s/pod_test.sh CASE   (root; a cluster up: tests/k8s/cluster.sh up)
#   ready        the pod turns Ready through its probes; NFS through its Service,
#                whose address outlives a replaced pod
#   ganesha-kill SIGKILL ganesha: restarted in place, no probe fails, data intact
#   ganesha-stop SIGSTOP ganesha: found hung, restarted in place
#   budget       the death budget spent: exit 3, the reason in the termination message
#   frozen       SIGSTOP share-manager: liveness fails and kubelet kills the container
#   delete       kubectl delete pod: SIGTERM, ganesha stopped, device unmounted, exit 0
#   bad-values   a placeholder left in, a wrong port, a probe on the TLS port: refused, named
#   egress       nothing left the cluster's range (its guard dropped nothing), no
#                DNS lookup, no image pull
set -uo pipefail
# shellcheck source=tests/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

case_name=${1:?usage: pod_test.sh CASE}
work=$(mktemp -d /tmp/sharemgr-k8s-test.XXXXXX)
volumes=()
cleanup() {
  local v
  for v in "${volumes[@]}"; do k8s_delete_share "$v"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

# Under 3.9 KB: libnfs fails a single larger NFSv4 WRITE, and nfs-cp sends one.
payload() { head -c "${2:-3000}" /dev/urandom >"$work/$1"; }

# new_share VOLUME [SED...]: its block volume, TLS secret, pod and Service; waits
# until the pod is Ready, and fails the test (saying why) when it never is.
new_share() {
  local vol=$1
  shift
  volumes+=("$vol")
  k8s_tls_secret
  k8s_block_volume "$vol" >/dev/null || { fail "a block volume for $vol"; return 1; }
  k8s_share "$vol" 1 "$@" || { fail "the pod and Service of $vol apply"; return 1; }
  if ! k8s_wait_ready "$(k8s_pod_name "$vol")" 120; then
    fail "pod $(k8s_pod_name "$vol") turns Ready"
    k describe pod "$(k8s_pod_name "$vol")" | tail -n 30
    k logs "$(k8s_pod_name "$vol")" --tail=30 2>&1
    return 1
  fi
}

# Small predicates for `eventually`.
phase_is() { [[ $(k8s_phase "$1") == "$2" ]]; }
gone() { ! kill -0 "$1" 2>/dev/null; }
pod_gone() { ! k get pod "$1" >/dev/null 2>&1; }
no_line_matching() { ! grep -Eq -- "$1" <<<"$2"; } # REGEX TEXT
# at_most BEFORE AFTER N: AFTER - BEFORE <= N, both read (a check needs a command).
at_most() { [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ ]] && (($2 - $1 <= $3)); }
# before LINE_A LINE_B: both found, A first.
before() { [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ ]] && (($1 < $2)); }
successes_above() { # POD TYPE N
  local n
  n=$(k8s_probe_successes "$1" "$2") && ((n > $3))
}
# A ganesha under POD's share-manager other than OLD, or the pod no longer running.
new_ganesha_or_ended() { # POD OLD
  local g
  g=$(k8s_ganesha_pid "$1")
  [[ -n $g && $g != "$2" ]] || [[ $(k8s_phase "$1") != Running ]]
}

device_unclaimed() {
  /usr/bin/python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))' "$1" 2>/dev/null
}

logged_clean_stop() { # POD: from kubelet's log file of its container
  local logs
  logs=$(cat "$SHAREMGR_K8S_DIR"/pod-logs/default_"$1"_*/share-manager/0.log 2>/dev/null)
  grep -q '\] stopping ganesha pid' <<<"$logs" && grep -q '\] stopped$' <<<"$logs"
}

pod_volume() { k get pod "$1" -o 'jsonpath={.metadata.labels.share-manager\/volume}'; }

# volume_same POD FILE LOCAL: the file on the pod's mounted volume has LOCAL's bytes.
volume_same() {
  local sm mnt
  sm=$(k8s_share_manager_pid "$1") || return 1
  mnt=$(awk -v dev="/dev/longhorn/$(pod_volume "$1")" '$1 == dev {print $2; exit}' "/proc/$sm/mounts")
  [[ -n $mnt ]] && cmp -s "/proc/$sm/root$mnt/$2" "$3"
}

probe_failures_of() { # POD TYPE...: the sum, or a failure when kubelet cannot be read
  local pod=$1 type n total=0
  shift
  for type in "$@"; do
    n=$(k8s_probe_failures "$pod" "$type") || return 1
    total=$((total + n))
  done
  echo "$total"
}

# ---------------------------------------------------------------- cases

case_ready() {
  local vol=k8s-ready pod svc ip1
  pod=$(k8s_pod_name "$vol")
  new_share "$vol" || return
  pass "pod $pod Ready"
  # Every shipped object, filled in for this share, is accepted by the real
  # apiserver (server-side dry run), then applied: the pod and its Service
  # are, and so is the NetworkPolicy beside them.
  local file out rc
  for file in "$k8s_repo"/container/k8s/*.yaml; do
    out=$(k8s_render "$(basename "$file")" "$vol" 1 2>/dev/null | k apply --dry-run=server -f - 2>&1)
    rc=$?
    check "the apiserver accepts $(basename "$file") as filled in ($out)" [ "$rc" == 0 ]
  done
  check "the NetworkPolicy applies" bash -c "source '$k8s_repo/tests/k8s/lib.sh' && k8s_render share-manager-networkpolicy.yaml '$vol' 1 2>/dev/null | k apply -f - >/dev/null"
  check "kubelet's startup probe succeeded" successes_above "$pod" Startup 0
  check "kubelet's liveness probe succeeded" eventually 30 successes_above "$pod" Liveness 0
  check "kubelet's readiness probe succeeded" successes_above "$pod" Readiness 0
  check "the pod's container has its block device mapped at /dev/longhorn/$vol" \
    k exec "$pod" -- test -b "/dev/longhorn/$vol"
  local sm g
  sm=$(k8s_share_manager_pid "$pod")
  g=$(k8s_ganesha_pid "$pod")
  check "share-manager runs under the runtime's default seccomp filter" grep -q '^Seccomp:[[:space:]]*2$' "/proc/$sm/status"
  check "so does ganesha" grep -q '^Seccomp:[[:space:]]*2$' "/proc/$g/status"
  # Seen from the node, in the container's own root.
  check "no service-account token is mounted" \
    bash -c "[[ -d /proc/$sm/root/etc && ! -e /proc/$sm/root/var/run/secrets/kubernetes.io ]]"
  check "share-manager mounted it (ext4) at the export" \
    grep -q "^/dev/longhorn/$vol /export/$vol ext4 rw" "/proc/$(k8s_share_manager_pid "$pod")/mounts"
  svc=$(k8s_service_ip "$vol")
  ip1=$(k8s_pod_ip "$pod")
  payload first
  check "NFS write through the Service ($svc, kube-proxy)" eventually 30 nfs_write "$svc" "$vol" first "$work/first"
  check "NFS read back through the Service" nfs_same "$svc" "$vol" first "$work/first"

  # The pod replaced (as the controller does, under the next epoch): the
  # Service's address stays, and so does the data on the volume.
  k delete pod "$pod" --wait=true --timeout=60s >/dev/null
  k8s_share "$vol" 2
  local pod2 ip2
  pod2=$(k8s_pod_name "$vol" 2)
  check "the replacement $pod2 turns Ready" k8s_wait_ready "$pod2" 120
  ip2=$(k8s_pod_ip "$pod2")
  check "the Service keeps its address ($svc)" [ "$(k8s_service_ip "$vol")" == "$svc" ]
  check "behind it, the replacement has a pod IP of its own ($ip1 -> $ip2)" [ -n "$ip2" -a "$ip2" != "$ip1" ]
  check "the first file reads back through the same Service address" eventually 30 nfs_same "$svc" "$vol" first "$work/first"
  payload second
  check "NFS write to the replacement through the Service" nfs_write "$svc" "$vol" second "$work/second"
  check "and read back" nfs_same "$svc" "$vol" second "$work/second"
}

ganesha_fault() { # ganesha_fault VOLUME SIGNAL
  local vol=$1 sig=$2 pod ip id started sm ganesha
  pod=$(k8s_pod_name "$vol")
  new_share "$vol" || return
  ip=$(k8s_pod_ip "$pod")
  payload data
  check "NFS write at the pod IP ($ip)" eventually 30 nfs_write "$ip" "$vol" data "$work/data"
  id=$(k8s_container_id "$pod")
  started=$(k8s_started_at "$pod")
  sm=$(k8s_share_manager_pid "$pod")
  ganesha=$(k8s_ganesha_pid "$pod")
  [[ -n $id && -n $started && -n $sm && -n $ganesha ]] || {
    fail "found the container (${id:-?}, ${started:-?}), share-manager (${sm:-?}) and ganesha (${ganesha:-?})"
    return
  }
  local lt_before rd_before ready_successes
  lt_before=$(probe_failures_of "$pod" Liveness Startup) || lt_before=unreadable
  rd_before=$(probe_failures_of "$pod" Readiness) || rd_before=unreadable
  # Readiness honestly says NOT_SERVING for the tens of milliseconds of a
  # restart; the fault comes right after a readiness probe, so that a SIGKILL's
  # restart is over before the next one.
  ready_successes=$(k8s_probe_successes "$pod" Readiness)
  eventually 10 successes_above "$pod" Readiness "$ready_successes"
  kill "-$sig" "$ganesha"
  if [[ $sig == STOP ]]; then
    check "the frozen ganesha ($ganesha) is found hung and killed" eventually 30 gone "$ganesha"
  fi
  # The restarted ganesha is in NFS grace (the shipped 90 s): it answers
  # READDIR and LOOKUP, but refuses OPEN to clients that cannot reclaim, as
  # libnfs (v4.0) cannot. So NFS is judged by a listing, the bytes on the volume.
  check "a new ganesha answers NFS at the pod IP (lists the file)" eventually 30 nfs_lists "$ip" "$vol" data
  check "the pod is Ready again" k8s_wait_ready "$pod" 10
  # Two readiness periods: any failure the restart caused is counted by now.
  sleep 4
  check "the same container ($id)" [ "$(k8s_container_id "$pod")" == "$id" ]
  check "the same container start time ($started)" [ "$(k8s_started_at "$pod")" == "$started" ]
  check "the same share-manager (pid $sm)" [ "$(k8s_share_manager_pid "$pod")" == "$sm" ]
  local now_ganesha
  now_ganesha=$(k8s_ganesha_pid "$pod")
  check "a new ganesha ($ganesha -> ${now_ganesha:-none}) under the same share-manager" \
    [ -n "$now_ganesha" -a "$now_ganesha" != "$ganesha" ]
  local lt_after rd_after
  lt_after=$(probe_failures_of "$pod" Liveness Startup) || lt_after=unreadable
  rd_after=$(probe_failures_of "$pod" Readiness) || rd_after=unreadable
  check "no liveness or startup probe failed in kubelet's prober metrics ($lt_before -> $lt_after)" \
    [ "$lt_before" != unreadable -a "$lt_after" == "$lt_before" ]
  # A hang is found a few seconds after the fault, at no set point between
  # two readiness probes: one probe may land in the restart and honestly see
  # NOT_SERVING. After a SIGKILL, none may.
  local allowed=0
  [[ $sig == STOP ]] && allowed=1
  check "at most $allowed readiness probe failed ($rd_before -> $rd_after)" at_most "$rd_before" "$rd_after" "$allowed"
  local unhealthy
  if unhealthy=$(k8s_events "$pod" Unhealthy); then
    check "no Unhealthy event for liveness or startup" no_line_matching '^Unhealthy: (Liveness|Startup)' "$unhealthy"
  else
    fail "the pod's events could be read"
  fi
  check "the data is intact on the volume" volume_same "$pod" data "$work/data"
  # What share-manager says of the death (its pids are those of the
  # container's pid namespace, not the node's), then a second ganesha.
  local death="ganesha pid [0-9]+ killed by signal 9"
  [[ $sig == STOP ]] && death="killing ganesha pid [0-9]+: hung: 3 NFS NULL probes missed"
  local logs
  logs=$(k logs "$pod")
  check "share-manager logged the death ('$death')" grep -Eq "$death" <<<"$logs"
  check "and started a second ganesha" [ "$(grep -c '\] started ganesha pid' <<<"$logs")" -ge 2 ]
}

case_budget() {
  # One death allowed: the second spends the budget.
  local vol=k8s-budget pod
  pod=$(k8s_pod_name "$vol")
  new_share "$vol" 's|- --stop-timeout=10s|- --stop-timeout=10s\n        - --max-deaths=1|' || return
  local g
  for _ in 1 2; do
    g=$(k8s_ganesha_pid "$pod") && [[ -n $g ]] && kill -KILL "$g"
    eventually 20 new_ganesha_or_ended "$pod" "$g"
  done
  check "the pod ends Failed (restartPolicy Never)" eventually 60 phase_is "$pod" Failed
  check "the container exited with share-manager's code 3 (ganesha's death budget spent)" \
    [ "$(k get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.terminated.exitCode}')" == 3 ]
  local msg
  msg=$(k get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.terminated.message}')
  echo "  termination message: ${msg:0:400}"
  check "its termination message is share-manager's reason, alone" grep -q "^exiting with code 3: " <<<"$msg"
  check "kubectl describe shows it" bash -c "kubectl describe pod '$pod' | grep -q 'exiting with code 3: '"
}

case_frozen() {
  local vol=k8s-frozen pod sm uid
  pod=$(k8s_pod_name "$vol")
  new_share "$vol" || return
  sm=$(k8s_share_manager_pid "$pod")
  uid=$(k get pod "$pod" -o 'jsonpath={.metadata.uid}')
  [[ -n $sm && -n $uid ]] || {
    fail "found share-manager (${sm:-?}) and the pod's uid (${uid:-?})"
    return
  }
  kill -STOP "$sm"
  # Liveness: every 10 s, 3 failures: about 30 s; then kubelet stops the
  # container (SIGTERM, which a frozen process cannot take, then SIGKILL after
  # terminationGracePeriodSeconds). kubelet drops a pod's probe series once
  # its container is gone, so its failure count is sampled meanwhile.
  local most=0 n deadline=$(($(now_ms) + 150000))
  while [[ $(k8s_phase "$pod") != Failed ]] && (($(now_ms) < deadline)); do
    n=$(k8s_probe_failures "$pod" Liveness) && ((n > most)) && most=$n
    sleep 1
  done
  check "kubelet ends the frozen container (the pod is Failed)" phase_is "$pod" Failed
  local events
  events=$(k get events --field-selector "involvedObject.uid=$uid" --sort-by=.metadata.creationTimestamp \
    -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}')
  echo "$events" | grep -E '^(Unhealthy|Killing|Started)' | sed 's/^/  event: /'
  local started unhealthy killing
  started=$(grep -n '^Started: ' <<<"$events" | head -n1 | cut -d: -f1)
  unhealthy=$(grep -n '^Unhealthy: Liveness probe failed' <<<"$events" | head -n1 | cut -d: -f1)
  killing=$(grep -n '^Killing: ' <<<"$events" | head -n1 | cut -d: -f1)
  check "a Liveness probe failed after the container started (Unhealthy event)" before "$started" "$unhealthy"
  check "then kubelet stopped the container (Killing event after it)" before "$unhealthy" "$killing"
  check "kubelet counted 3 failed liveness probes before acting ($most)" [ "$most" -ge 3 ]
  check "the container's end is a kill (exit 137)" \
    [ "$(k get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.terminated.exitCode}')" == 137 ]
  check "no share-manager of the pod is left" gone "$sm"
}

case_delete() {
  local vol=k8s-delete pod sm ganesha dev
  pod=$(k8s_pod_name "$vol")
  new_share "$vol" || return
  sm=$(k8s_share_manager_pid "$pod")
  ganesha=$(k8s_ganesha_pid "$pod")
  dev=$(k get pv "$vol" -o 'jsonpath={.spec.local.path}')
  [[ -n $sm && -n $ganesha && -n $dev ]] || {
    fail "found share-manager (${sm:-?}), ganesha (${ganesha:-?}) and the device (${dev:-?})"
    return
  }
  local t0 ms
  # kubelet reports the container's exit before the pod object goes: watch for it.
  kubectl get pod "$pod" --watch --request-timeout=90s \
    -o 'jsonpath={.status.containerStatuses[0].state.terminated.exitCode}{"\n"}' >"$work/exits" 2>/dev/null &
  local watcher=$!
  # Its first answer (the pod as it is, an empty line) before the delete.
  eventually 20 test -s "$work/exits" || fail "the watch answered"
  t0=$(now_ms)
  k delete pod "$pod" --wait=false >/dev/null
  eventually 60 gone "$sm"
  ms=$(($(now_ms) - t0))
  check "share-manager ended within terminationGracePeriodSeconds ($ms ms < 45 s)" [ "$ms" -lt 45000 ]
  check "its ganesha had been stopped by then" gone "$ganesha"
  # kubelet's copy of the log, which the container runtime may finish writing a moment later.
  check "share-manager logged ganesha's stop and then its own" eventually 10 logged_clean_stop "$pod"
  # The kernel's own answer, across every mount namespace: a mounted block
  # device cannot be opened exclusively.
  check "the device ($dev) is mounted nowhere (it opens O_EXCL)" eventually 30 device_unclaimed "$dev"
  check "the pod is gone" eventually 30 pod_gone "$pod"
  kill "$watcher" 2>/dev/null
  wait "$watcher" 2>/dev/null
  check "the container exited 0 (a deliberate stop; seen: $(grep . "$work/exits" | sort -u | tr '\n' ' '))" \
    [ "$(grep . "$work/exits" | sort -u)" == 0 ]
}

case_bad_values() {
  local out
  # A placeholder left in the NetworkPolicy: the apiserver refuses it, naming the field.
  out=$(sed "s|pvc-example|k8s-bad|g" "$k8s_repo/container/k8s/share-manager-networkpolicy.yaml" |
    k apply --dry-run=server -f - 2>&1)
  echo "  apiserver: $out"
  check "a NetworkPolicy with the node-CIDR placeholder left in is refused, naming ipBlock.cidr" \
    grep -q 'ipBlock.cidr: Invalid value: "REPLACE_WITH_NODE_CIDR"' <<<"$out"
  # The same placeholder left in the pod's --nfs-clients: share-manager refuses
  # to start (exit 2) and the termination message names the flag.
  local vol=k8s-bad-pod pod
  pod=$(k8s_pod_name "$vol")
  volumes+=("$vol")
  k8s_tls_secret
  k8s_block_volume "$vol" >/dev/null
  k8s_render share-manager-pod.yaml "$vol" 1 "s|--nfs-clients=$SHAREMGR_K8S_NODE_CIDR|--nfs-clients=REPLACE_WITH_NODE_CIDR|" |
    k apply -f - >/dev/null
  check "a pod with the placeholder in --nfs-clients ends Failed" eventually 60 phase_is "$pod" Failed
  local code msg
  code=$(k get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.terminated.exitCode}')
  msg=$(k get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.terminated.message}')
  echo "  termination message: $msg"
  check "with exit code 2 (bad input; nothing started)" [ "$code" == 2 ]
  check "its termination message names --nfs-clients" grep -q -- "^share-manager: --nfs-clients 'REPLACE_WITH_NODE_CIDR'" <<<"$msg"
  k delete pod "$pod" --wait=true --timeout=60s >/dev/null 2>&1
  # A probe on the wrong port, or on the TLS API port: the manifest check
  # refuses it before it reaches a cluster, naming the probe. (The check's
  # validator is installed, and the shipped manifests pass it, first.)
  local npm=${SHAREMGR_NPM_DIR:-$work/npm}
  check "the shipped manifests pass the manifest check" \
    bash "$k8s_repo/tests/container/check_manifests.sh" "$npm" >/dev/null
  local bad rc
  for bad in 's|port: 9601|port: 9611|' 's|port: 9601|port: 9600|'; do
    rm -rf "$work/k8s" && cp -rL "$k8s_repo/container/k8s" "$work/k8s"
    sed -i "$bad" "$work/k8s/share-manager-pod.yaml"
    out=$(NODE_PATH=$npm/node_modules node "$k8s_repo/tests/container/validate_manifests.js" \
      --dir "$work/k8s" --node-cidr "$SHAREMGR_K8S_NODE_CIDR" 2>&1)
    rc=$?
    grep '^FAIL' <<<"$out" | head -n 3 | sed 's/^/  manifest check: /'
    check "the manifest check refuses a probe moved by '$bad', naming the probe and port" \
      bash -c "[[ $rc != 0 ]] && grep -q '^FAIL .*Probe uses a published health service on the health port: probes port ${bad:19:4}' <<<\"\$0\"" "$out"
  done
}

case_egress() {
  local dropped table
  for table in filter mangle; do
    check "the cluster's guard is in place ($table)" iptables -t "$table" -S "$SHAREMGR_K8S_DROP_CHAIN"
  done
  dropped=$(for table in filter mangle; do iptables -t "$table" -L "$SHAREMGR_K8S_DROP_CHAIN" -nvx; done |
    awk '$3 == "DROP" {s += $1} END {print s + 0}')
  check "no packet tried to enter or leave the cluster's range but through its bridges ($dropped dropped)" [ "$dropped" == 0 ]
  # Host-side components resolve no name through the machine's resolver: a
  # lookup would show in their logs as "lookup NAME on ADDRESS:53".
  local lookups
  lookups=$(grep -l 'lookup .* on .*:53' "$SHAREMGR_K8S_DIR"/log/*.log 2>/dev/null)
  check "no cluster component tried a DNS lookup${lookups:+ (see $lookups)}" [ -z "$lookups" ]
  check "no image pull was attempted (no Pulling event)" \
    bash -c '! kubectl get events -A -o "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}" | grep -qx Pulling'
  check "containerd was asked to pull nothing" bash -c "! grep -q 'PullImage' '$SHAREMGR_K8S_DIR/log/containerd.log'"
}

case $case_name in
  ready) case_ready ;;
  ganesha-kill) ganesha_fault k8s-kill KILL ;;
  ganesha-stop) ganesha_fault k8s-stop STOP ;;
  budget) case_budget ;;
  frozen) case_frozen ;;
  delete) case_delete ;;
  bad-values) case_bad_values ;;
  egress) case_egress ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
finish
