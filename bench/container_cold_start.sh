#!/usr/bin/env bash
# Image size and cold start of a share inside the share-manager image:
# from `buildah run` (and from share-manager's own exec) to readiness
# SERVING, each run in a fresh container (empty state and export dirs), side
# by side with the same binary started directly on the host.
#
# Usage: bench/container_cold_start.sh [RUNS]   (root; default 10 runs)
#   SHARE_MANAGER_IMAGE=TAG  measure that image instead of building one from
#                            the working tree with container/build.sh.
# Readiness is polled every ~10 ms with `share-manager probe`; start times come
# from /proc (10 ms resolution), so figures are good to about +-20 ms.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-10}
HOST_SM=$repo/build/sharemgr/share-manager
STORAGE=(--storage-driver vfs)
source "$repo/tests/container/image_share.sh"
[[ -x $HOST_SM ]] || bash "$repo/scripts/build.sh" >/dev/null

work=$(mktemp -d /tmp/share-manager-cold-start.XXXXXX)
tag=${SHARE_MANAGER_IMAGE:-localhost/share-manager:bench-$$}
ctr=
grpc_port=
cleanup() {
  [[ -z $grpc_port ]] || image_share_kill "$grpc_port"
  [[ -z $ctr ]] || buildah "${STORAGE[@]}" rm "$ctr" >/dev/null 2>&1 || true
  [[ -n ${SHARE_MANAGER_IMAGE:-} ]] || podman "${STORAGE[@]}" rmi "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM # so that cleanup runs when interrupted too

if [[ -z ${SHARE_MANAGER_IMAGE:-} ]]; then
  echo "building $tag from the working tree"
  bash "$repo/container/build.sh" "$tag" >"$work/build.log" 2>&1 || {
    tail -n 30 "$work/build.log"
    exit 1
  }
fi
unpacked=$(podman "${STORAGE[@]}" image inspect "$tag" --format '{{.Size}}')
compressed=$(podman "${STORAGE[@]}" save --format docker-archive "$tag" 2>/dev/null | gzip -6 | wc -c)
awk -v tag="$tag" -v u="$unpacked" -v c="$compressed" 'BEGIN {
  printf "image %s: %.1f MB unpacked, %.1f MB compressed (gzip -6 of podman save)\n", tag, u / 1e6, c / 1e6 }'

# summary NAME VALUES...: median and max in ms.
summary() {
  local name=$1
  shift
  sort -n <<<"$(printf '%s\n' "$@")" | awk -v name="$name" '
    { v[NR] = $1 } END {
      median = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%-44s median %6.0f ms   max %6.0f ms   (%d runs)\n", name, median, v[NR], NR }'
}

# One cold start: the runner is already started; waits for SERVING, records
# both latencies, stops the share with SIGTERM.
measure() {
  local from_runner exec_ms pid
  from_runner=$(image_share_wait_serving 60) || {
    tail -n 30 "$work/share.log"
    exit 1
  }
  pid=$(image_share_pid "$grpc_port")
  exec_ms=$((IMAGE_SHARE_STARTED_MS + from_runner - $(process_start_ms "$pid")))
  runner_samples+=("$from_runner")
  exec_samples+=("$exec_ms")
  image_share_stop "$grpc_port"
  ((IMAGE_SHARE_EXIT == 0)) || { echo "share exited with $IMAGE_SHARE_EXIT"; exit 1; }
}

runner_samples=() exec_samples=()
for i in $(seq "$runs"); do
  ctr=$(buildah "${STORAGE[@]}" from --pull=never "$tag")
  grpc_port=$(free_port)
  image_share_start "$ctr" "cold-$i" "$(free_port)" "$grpc_port" "$work/share.log"
  measure
  buildah "${STORAGE[@]}" rm "$ctr" >/dev/null
  ctr=
done
summary "in the image: buildah run -> SERVING" "${runner_samples[@]}"
summary "in the image: share-manager exec -> SERVING" "${exec_samples[@]}"

runner_samples=() exec_samples=()
for i in $(seq "$runs"); do
  grpc_port=$(free_port)
  IMAGE_SHARE_STARTED_MS=$(now_ms)
  "$HOST_SM" daemon --volume "cold-$i" --export-dir "$work/host-$i/export" \
    --state-dir "$work/host-$i/state" --nfs-address 127.0.0.1 --nfs-port "$(free_port)" \
    --listen "127.0.0.1:$grpc_port" --grace-period 2 --lease-lifetime 2 >"$work/share.log" 2>&1 &
  IMAGE_SHARE_RUNNER=$!
  measure
done
summary "on the host: share-manager exec -> SERVING" "${exec_samples[@]}"
