#!/usr/bin/env bash
# share-controller --kubernetes on the test cluster's real node
# (docs/BENCHMARKS.md "share-controller on a real node"):
#   failover  ganesha's death budget spent in the pod (--max-deaths=1, two
#             SIGKILLs) -> the share's Service answers an NFS LOOKUP again
#             (what a client feels), beside -> the share's status RUNNING
#             under the next epoch (what the controller records). Each run on
#             a share of its own: no replacement backoff from an earlier run.
#   load      SHARES shares (default 12) made at once -> all RUNNING; then,
#             at steady state over 60 s, the controller's Kubernetes API
#             requests per second per share (its own count, by method),
#             beside the apiserver's total, and reconcile passes per second
#             with their mean duration.
#   leader    two replicas; the leader SIGKILLed -> the other holds the Lease,
#             -> it acts (reconciles), with the default --leader-ttl (5 s).
#             Each run adds a new standby, lets it follow for 6-8.7 s (the
#             kill falls anywhere in a renewal interval), and kills the one
#             leading.
#
# Usage: bench/k8s_controller_bench.sh BUILD_DIR [RUNS] [WHAT...]   (root;
#   RUNS default 5, WHAT default: failover load leader; SHARES=N for load)
# Brings up its own cluster (tests/k8s/cluster.sh) in /run/sharemgr-k8s-bench
# with the image built from HEAD and takes it down at the end; with
# SHAREMGR_K8S_DIR of a cluster already up (the tests' fixture), uses that
# one and leaves it up.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:?usage: k8s_controller_bench.sh BUILD_DIR [RUNS] [WHAT...]}")
runs=${2:-5}
shift 2 2>/dev/null || shift $#
whats=("$@")
((${#whats[@]})) || whats=(failover load leader)
tool=$build/bench/k8s_nfs_tool
controller_bin=$build/controller/share-controller
for bin in "$tool" "$controller_bin"; do
  [[ -x $bin ]] || {
    echo "k8s_controller_bench: build $bin first"
    exit 1
  }
done
bench_image=localhost/share-manager:k8s-bench
own_cluster=
if [[ -z ${SHAREMGR_K8S_DIR:-} || ! -f $SHAREMGR_K8S_DIR/env ]]; then
  export SHAREMGR_K8S_DIR=/run/sharemgr-k8s-bench
  own_cluster=1
fi
work=$(mktemp -d /tmp/sharemgr-k8s-ctl-bench.XXXXXX)
ctl_pid=
standbys=()
made=()

cleanup() {
  k delete smgr "${made[@]}" --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1
  [[ -z $ctl_pid ]] || { kill -TERM "$ctl_pid" 2>/dev/null; wait "$ctl_pid" 2>/dev/null; }
  local pid
  for pid in "${standbys[@]}"; do
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  k delete lease share-controller --ignore-not-found >/dev/null 2>&1
  for vol in "${made[@]}"; do
    k patch smgr "$vol" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
    k8s_delete_share "$vol"
  done
  k delete -f "$repo/deploy/base/rbac.yaml" --ignore-not-found >/dev/null 2>&1
  k delete -f "$repo/deploy/base/crd.yaml" --ignore-not-found --wait=true >/dev/null 2>&1
  rm -rf "$work"
  if [[ -n $own_cluster ]]; then
    bash "$repo/tests/k8s/cluster.sh" down "$SHAREMGR_K8S_DIR"
    podman --storage-driver vfs rmi "$bench_image" >/dev/null 2>&1
  fi
}
trap cleanup EXIT

if [[ -n $own_cluster ]]; then
  bash "$repo/tests/k8s/cluster.sh" down "$SHAREMGR_K8S_DIR"
  bash "$repo/tests/k8s/cluster.sh" up "$SHAREMGR_K8S_DIR" >/dev/null || exit 1
  podman --storage-driver vfs rmi "$bench_image" >/dev/null 2>&1
  bash "$repo/container/build_head.sh" "$bench_image" || exit 1
  bash "$repo/tests/k8s/cluster.sh" import-image "$bench_image" "$SHAREMGR_K8S_DIR" >/dev/null
  export SHARE_MANAGER_K8S_IMAGE=$bench_image
fi
# shellcheck source=tests/k8s/lib.sh
source "$repo/tests/k8s/lib.sh"

k8s_controller_setup "$work"
metrics_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$controller_bin" --kubernetes --kubeconfig "$work/kubeconfig" --pod-template "$work/template.yaml" \
  --tls-dir "$work/tls/controller" --tls-server-name share-manager \
  --metrics-listen "127.0.0.1:$metrics_port" >"$work/controller.log" 2>&1 &
ctl_pid=$!
eventually 30 grep -q "controlling the ShareManagers" "$work/controller.log" || {
  echo "k8s_controller_bench: share-controller did not start:"
  cat "$work/controller.log"
  exit 1
}

scrape() { curl -sf "http://127.0.0.1:$metrics_port/metrics"; }
field() { k get smgr "$1" -o "jsonpath=$2" 2>/dev/null; }
running_epoch() { [[ $(field "$1" '{.status.phase} {.status.epoch}') == "RUNNING $2" ]]; }

# share VOLUME [FLAG...]: its block volume and ShareManager object.
share() {
  local vol=$1 flags=""
  shift
  (($#)) && flags=$(printf '"%s",' "$@") && flags="daemonFlags: [${flags%,}]"
  k8s_block_volume "$vol" >/dev/null || return 1
  made+=("$vol")
  k apply -f - >/dev/null <<YAML
apiVersion: share-manager.io/v1alpha1
kind: ShareManager
metadata: {name: $vol}
spec: {$flags}
YAML
}

new_ganesha() { # POD OLD_PID
  local g
  g=$(k8s_ganesha_pid "$1")
  [[ -n $g && $g != "$2" ]]
}

bench_failover() {
  local i vol svc g g2 t0 served users=() records=()
  for ((i = 1; i <= runs; i++)); do
    vol=bench-fo-$i
    share "$vol" --max-deaths=1 || return
    eventually 120 running_epoch "$vol" 1 || {
      echo "failover: run $i: never RUNNING"
      continue
    }
    svc=$(k8s_service_ip "$vol")
    head -c 1000 /dev/urandom >"$work/payload"
    eventually 30 nfs_write "$svc" "$vol" before "$work/payload" || {
      echo "failover: run $i: the Service never served"
      continue
    }
    # The first death, restarted in place; the second spends the budget.
    g=$(k8s_ganesha_pid "$(k8s_pod_name "$vol" 1)")
    kill -KILL "$g"
    eventually 20 new_ganesha "$(k8s_pod_name "$vol" 1)" "$g"
    g2=$(k8s_ganesha_pid "$(k8s_pod_name "$vol" 1)")
    t0=$(now_ms)
    "$tool" kill-and-wait --pid "$g2" --host "$svc" --component "$vol" --timeout-ms 120000 >"$work/user" &
    served=
    while [[ -z $served ]] && (($(now_ms) - t0 < 120000)); do
      running_epoch "$vol" 2 && served=$(($(now_ms) - t0))
      sleep 0.05
    done
    wait $!
    [[ -s $work/user ]] && users+=("$(<"$work/user")")
    [[ -n $served ]] && records+=("$served")
  done
  echo "death budget spent -> the Service answers LOOKUP (ms): $(printf '%s\n' "${users[@]}" | stats)"
  echo "death budget spent -> status RUNNING under epoch 2 (ms): $(printf '%s\n' "${records[@]}" | stats)"
}

# The sum of the samples in a scrape (stdin) whose line starts with PREFIX.
sum_of() { awk -v pre="$1" 'index($0, pre) == 1 {s += $NF} END {printf "%.0f\n", s}'; }

load_running() { # N: all N bench-load shares RUNNING
  local phases
  phases=$(k get smgr -o 'jsonpath={range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}' 2>/dev/null | grep '^bench-load-')
  [[ $(grep -c ' RUNNING$' <<<"$phases") == "$1" ]]
}

bench_load() {
  local n=${SHARES:-12} i t0 before after api0 api1 d
  t0=$(now_ms)
  for ((i = 1; i <= n; i++)); do share "bench-load-$i" || return; done
  eventually 600 load_running "$n" || echo "load: not all $n RUNNING"
  echo "$n shares created -> all RUNNING: $(($(now_ms) - t0)) ms"
  sleep 10
  before=$(scrape)
  api0=$(k get --raw /metrics | sum_of 'apiserver_request_total{')
  sleep 60
  after=$(scrape)
  api1=$(k get --raw /metrics | sum_of 'apiserver_request_total{')
  echo "steady state, $n shares, 60 s:"
  for method in GET PUT POST PATCH DELETE WATCH; do
    d=$(($( sum_of "sharemgr_controller_api_requests_total{method=\"$method\"" <<<"$after") - $(sum_of "sharemgr_controller_api_requests_total{method=\"$method\"" <<<"$before")))
    echo "  controller API requests $method: $d ($(awk -v d="$d" -v n="$n" 'BEGIN {printf "%.4f", d / 60 / n}') /s per share)"
  done
  echo "  apiserver requests from every client (kubelet, controllers, this bench's kubectl): $(((api1 - api0) / 60)) /s"
  local p0 p1 s0 s1
  p0=$(sum_of 'sharemgr_controller_reconcile_passes_total' <<<"$before")
  p1=$(sum_of 'sharemgr_controller_reconcile_passes_total' <<<"$after")
  s0=$(awk '/^sharemgr_controller_reconcile_duration_seconds_sum/ {print $NF}' <<<"$before")
  s1=$(awk '/^sharemgr_controller_reconcile_duration_seconds_sum/ {print $NF}' <<<"$after")
  echo "  reconcile passes: $(awk -v d=$((p1 - p0)) 'BEGIN {printf "%.1f", d / 60}') /s, mean $(awk -v s0="$s0" -v s1="$s1" -v d=$((p1 - p0)) 'BEGIN {printf "%.2f", (s1 - s0) / d * 1000}') ms each"
}

bench_leader() {
  local i id log t0 now held acting holds=() acts=()
  for ((i = 1; i <= runs; i++)); do
    id=bench-standby-$i log=$work/standby-$i.log
    "$controller_bin" --kubernetes --kubeconfig "$work/kubeconfig" --pod-template "$work/template.yaml" \
      --tls-dir "$work/tls/controller" --tls-server-name share-manager --replica-id "$id" >"$log" 2>&1 &
    local standby=$!
    standbys+=("$standby")
    eventually 30 grep -q "following the leader" "$log" || {
      echo "leader: run $i: the standby never followed"
      kill -KILL "$standby"
      wait "$standby" 2>/dev/null
      return
    }
    # A standby of some standing (it has seen renewals), the kill at any
    # point of the leader's renewal interval (TTL/3).
    sleep "6.$(printf '%03d' $((RANDOM % 1000)))"
    sleep "$(awk -v r=$((RANDOM % 1667)) 'BEGIN {printf "%.3f", r / 1000}')"
    t0=$(now_ms)
    kill -KILL "$ctl_pid"
    wait "$ctl_pid" 2>/dev/null
    ctl_pid=$standby
    held='' acting=''
    while [[ -z $acting ]] && (($(now_ms) - t0 < 60000)); do
      now=$(now_ms)
      [[ -z $held && $(k8s_leader) == "$id" ]] && held=$((now - t0))
      grep -q "controlling the ShareManagers" "$log" && acting=$((now - t0))
      sleep 0.02
    done
    [[ -n $held ]] && holds+=("$held")
    [[ -n $acting ]] && acts+=("$acting")
  done
  echo "leader SIGKILLed -> the other holds the Lease (ms): $(printf '%s\n' "${holds[@]}" | stats)"
  echo "leader SIGKILLed -> the other acts (ms): $(printf '%s\n' "${acts[@]}" | stats)"
}

for what in "${whats[@]}"; do "bench_$what"; done
