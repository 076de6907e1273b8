#!/usr/bin/env bash
# The main job, on one machine: set up, build, and serve a local directory
# over NFSv4 on 127.0.0.1 with real ganesha under share-manager. Shows the
# status, writes a file through NFS and reads it back, kills ganesha to show
# the in-place restart, then stops cleanly with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh

sm=$PWD/build/sharemgr/share-manager
work=$(mktemp -d /tmp/share-manager-demo.XXXXXX)
nfs_port=${NFS_PORT:-20490}
grpc_addr=127.0.0.1:${GRPC_PORT:-19600}
health_addr=127.0.0.1:${HEALTH_PORT:-19601} # plaintext, health checks only (what kubelet probes)
volume=demo-volume
daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid"; wait "$daemon_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== starting share-manager (log: $work/share-manager.log)"
"$sm" daemon --volume "$volume" --export-dir "$work/export" --state-dir "$work/state" \
  --nfs-address 127.0.0.1 --nfs-port "$nfs_port" --listen "$grpc_addr" \
  --health-listen "$health_addr" --grace-period 5 --lease-lifetime 5 >"$work/share-manager.log" 2>&1 &
daemon_pid=$!

for _ in $(seq 100); do
  "$sm" probe --addr "$health_addr" --timeout 1s >/dev/null 2>&1 && break
  sleep 0.1
done
"$sm" status --addr "$grpc_addr"

url="nfs://127.0.0.1/$volume/hello.txt?version=4&nfsport=$nfs_port"
echo "hello from share-manager at $(date -u +%FT%TZ)" >"$work/hello.txt"
echo "== writing $url"
nfs-cp "$work/hello.txt" "$url"
echo "== reading it back through NFS:"
nfs-cat "$url"
echo "== the same file in the export directory:"
cat "$work/export/hello.txt"

old=$("$sm" status --addr "$grpc_addr" --json | sed -n 's/.*"ganesha_pid":\([0-9]*\).*/\1/p')
echo "== SIGKILL ganesha (pid $old); share-manager restarts it in place"
kill -KILL "$old"
for _ in $(seq 100); do
  new=$("$sm" status --addr "$grpc_addr" --json | sed -n 's/.*"ganesha_pid":\([0-9]*\).*/\1/p')
  [[ -n $new && $new != 0 && $new != "$old" ]] && "$sm" probe --addr "$grpc_addr" >/dev/null 2>&1 && break
  sleep 0.05
done
"$sm" status --addr "$grpc_addr"
echo "== reading the file again after the restart (waits out NFS grace if needed):"
for _ in $(seq 100); do nfs-cat "$url" 2>/dev/null && break; sleep 0.1; done

echo "== SIGTERM share-manager"
kill -TERM "$daemon_pid"
code=0; wait "$daemon_pid" || code=$?
daemon_pid=
echo "share-manager exited with code $code"
echo "== last lines of its log:"
tail -n 5 "$work/share-manager.log"
