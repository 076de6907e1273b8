#!/usr/bin/env bash
# The shipped pod on the test cluster's real node (docs/BENCHMARKS.md "On a
# real node"): what an operator and a client see, each over RUNS runs.
#   ready    pod created -> Ready (kubelet's startup and readiness probes)
#   kill     ganesha SIGKILLed -> the pod IP answers an NFS LOOKUP of the export again
#   frozen   share-manager SIGSTOPped -> kubelet's first failed liveness probe,
#            and -> kubelet acting (its Killing event)
#   memory   the container's working set as kubelet reports it (/stats/summary),
#            idle and after 100,000 files, beside share-manager's and ganesha's PSS
#   start    the cluster's warm start (binaries cached) and its teardown
#
# Usage: bench/k8s_bench.sh BUILD_DIR [RUNS] [WHAT...]   (root; default RUNS 10, WHAT all)
# Brings up its own cluster (tests/k8s/cluster.sh) in /run/sharemgr-k8s-bench,
# with the image built from HEAD, and takes it down at the end.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:?usage: k8s_bench.sh BUILD_DIR [RUNS] [WHAT...]}")
runs=${2:-10}
shift 2 2>/dev/null || shift $#
whats=("$@")
((${#whats[@]})) || whats=(ready kill frozen memory start)
tool=$build/bench/k8s_nfs_tool
[[ -x $tool ]] || {
  echo "k8s_bench: build $tool first (cmake --build $build --target k8s_nfs_tool)"
  exit 1
}
export SHAREMGR_K8S_DIR=/run/sharemgr-k8s-bench
bench_image=localhost/share-manager:k8s-bench

cluster_up() {
  bash "$repo/tests/k8s/cluster.sh" down "$SHAREMGR_K8S_DIR"
  bash "$repo/tests/k8s/cluster.sh" up "$SHAREMGR_K8S_DIR" >/dev/null || exit 1
  # Always HEAD's image: one left from an older run would time old code.
  podman --storage-driver vfs rmi "$bench_image" >/dev/null 2>&1
  bash "$repo/container/build_head.sh" "$bench_image" || exit 1
  bash "$repo/tests/k8s/cluster.sh" import-image "$bench_image" "$SHAREMGR_K8S_DIR" >/dev/null
}
cluster_down() { bash "$repo/tests/k8s/cluster.sh" down "$SHAREMGR_K8S_DIR"; }
trap 'cluster_down; podman --storage-driver vfs rmi "$bench_image" >/dev/null 2>&1' EXIT

cluster_up
export SHARE_MANAGER_K8S_IMAGE=$bench_image
# shellcheck source=tests/k8s/lib.sh
source "$repo/tests/k8s/lib.sh"
k8s_tls_secret

# share VOLUME [SED...]: a fresh block volume and the pod, Ready; prints the pod.
# BENCH_VOLUME_SIZE / BENCH_MKFS (words) size and format the volume.
share() {
  local vol=$1
  shift
  # shellcheck disable=SC2086 # mkfs options, one word each
  k8s_block_volume "$vol" "${BENCH_VOLUME_SIZE:-192M}" ${BENCH_MKFS:-} >/dev/null
  k8s_share "$vol" 1 "$@" 2>/dev/null
  k8s_wait_ready "$(k8s_pod_name "$vol")" 120 || {
    echo "k8s_bench: $(k8s_pod_name "$vol") never turned Ready" >&2
    return 1
  }
  k8s_pod_name "$vol"
}

bench_ready() {
  local i t0 vol samples=()
  for ((i = 1; i <= runs; i++)); do
    vol=bench-ready-$i
    k8s_block_volume "$vol" >/dev/null
    t0=$(now_ms)
    k8s_share "$vol" 1 2>/dev/null
    k8s_wait_ready "$(k8s_pod_name "$vol")" 120 || {
      echo "ready: run $i never Ready"
      continue
    }
    samples+=($(($(now_ms) - t0)))
    k8s_delete_share "$vol"
  done
  echo "pod created -> Ready (ms): $(printf '%s\n' "${samples[@]}" | stats)"
}

bench_kill() {
  local pod ip g i ms samples=()
  # The budget raised for the benchmark only: RUNS deaths in a row.
  pod=$(share bench-kill 's|- --stop-timeout=10s|- --stop-timeout=10s\n        - --max-deaths=1000|') || return
  ip=$(k8s_pod_ip "$pod")
  for ((i = 1; i <= runs; i++)); do
    g=$(k8s_ganesha_pid "$pod")
    ms=$("$tool" kill-and-wait --pid "$g" --host "$ip" --port 2049 --component bench-kill) || {
      echo "kill: run $i: no answer"
      continue
    }
    samples+=("$ms")
    # Past the restart policy's stable_after (10 s): each kill an isolated
    # crash, restarted at once, not the next of a streak (which backs off).
    sleep 11
  done
  echo "ganesha SIGKILL -> LOOKUP answered at the pod IP (ms): $(printf '%s\n' "${samples[@]}" | stats)"
  echo "  container restarts meanwhile: $(k get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].restartCount}')"
  k8s_delete_share bench-kill
}

bench_frozen() {
  local i vol pod sm uid t0 first acted ev probes=() kills=()
  for ((i = 1; i <= runs; i++)); do
    vol=bench-frozen-$i
    pod=$(share "$vol") || return
    sm=$(k8s_share_manager_pid "$pod")
    uid=$(k get pod "$pod" -o 'jsonpath={.metadata.uid}')
    t0=$(now_ms)
    kill -STOP "$sm"
    first="" acted=""
    while [[ -z $acted ]] && (($(now_ms) - t0 < 120000)); do
      ev=$(k get events --field-selector "involvedObject.uid=$uid" -o 'jsonpath={range .items[*]}{.reason}|{.message}{"\n"}{end}')
      [[ -z $first ]] && grep -q '^Unhealthy|Liveness' <<<"$ev" && first=$(($(now_ms) - t0))
      grep -q '^Killing|' <<<"$ev" && acted=$(($(now_ms) - t0))
      sleep 0.2
    done
    [[ -n $first ]] && probes+=("$first")
    [[ -n $acted ]] && kills+=("$acted")
    kill -CONT "$sm" 2>/dev/null
    k delete pod "$pod" --grace-period=0 --force >/dev/null 2>&1
    k8s_delete_share "$vol"
  done
  echo "share-manager frozen -> first failed liveness probe reported (ms): $(printf '%s\n' "${probes[@]}" | stats)"
  echo "share-manager frozen -> kubelet kills the container (ms): $(printf '%s\n' "${kills[@]}" | stats)"
}

# working_set POD: the container's working set, from kubelet's summary.
working_set() {
  k8s_kubelet_get stats/summary | /usr/bin/python3 -c '
import json, sys
pod = sys.argv[1]
for p in json.load(sys.stdin)["pods"]:
    if p["podRef"]["name"] == pod:
        for c in p.get("containers", []):
            print(round(c["memory"]["workingSetBytes"] / 1048576, 1))' "$1"
}
pss() { awk '/^Pss:/ {printf "%.1f", $2 / 1024}' "/proc/$1/smaps_rollup"; }

bench_memory() {
  local pod sm g
  # Room for 100,000 files: 1 GiB, an inode per 4 KiB.
  pod=$(BENCH_VOLUME_SIZE=1G BENCH_MKFS="-i 4096" share bench-memory) || return
  sm=$(k8s_share_manager_pid "$pod")
  g=$(k8s_ganesha_pid "$pod")
  sleep 30 # kubelet's stats are gathered every few seconds: let them settle
  echo "idle: working set $(working_set "$pod") MiB; PSS share-manager $(pss "$sm") MiB, ganesha $(pss "$g") MiB"
  "$tool" tree --host "$(k8s_pod_ip "$pod")" --export /bench-memory --files 100000 || return
  sleep 30
  echo "after 100,000 files: working set $(working_set "$pod") MiB; PSS share-manager $(pss "$sm") MiB, ganesha $(pss "$g") MiB"
  k8s_delete_share bench-memory
}

bench_start() {
  cluster_down
  local i t0 ups=() downs=()
  for ((i = 1; i <= runs; i++)); do
    t0=$(now_ms)
    bash "$repo/tests/k8s/cluster.sh" up "$SHAREMGR_K8S_DIR" >/dev/null 2>"$SHAREMGR_K8S_DIR.start.log" || {
      echo "start: run $i failed:"
      grep -E 'up failed|timed out waiting' "$SHAREMGR_K8S_DIR.start.log"
      tail -n 20 "$SHAREMGR_K8S_DIR.start.log"
      cluster_down >/dev/null 2>&1
      continue
    }
    ups+=($(($(now_ms) - t0)))
    t0=$(now_ms)
    cluster_down >/dev/null 2>&1
    downs+=($(($(now_ms) - t0)))
  done
  rm -f "$SHAREMGR_K8S_DIR.start.log"
  echo "cluster warm start, up to node Ready (ms): $(printf '%s\n' "${ups[@]}" | stats)"
  echo "cluster down, nothing left (ms): $(printf '%s\n' "${downs[@]}" | stats)"
}

echo "k8s_bench: $(date -u +%F), $(nproc) cores, Kubernetes $(kubectl version -o json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'), $runs runs each"
for what in "${whats[@]}"; do
  "bench_$what"
done
