#!/usr/bin/env bash
# share-controller --kubernetes on the real node, with nothing but its
# ServiceAccount's rights (deploy/base/rbac.yaml): a ShareManager object gets
# its pod, Ready through kubelet's probes, and SERVING in its status; NFS
# through the share's Service; a controller restart adopts the pod; the death
# budget spent gives a replacement under epoch+1 that serves the same data
# through the same Service, the old pod deleted; a read-only ext4, twice, is
# one remount generation per event and keeps the pod; kubelet frozen while
# the serving pod is deleted gives ERROR, a quiet wait and never two
# share-managers, then epoch 3 once kubelet resumes; a frozen share-manager is
# replaced once (epoch 4), the controller and kubelet ending one container;
# deleting the share while a
# client writes holds it (its finalizer) until its pod is gone and the device
# released, and every acknowledged write is on the device.
#
# Usage: tests/k8s/controller_test.sh   (root; a cluster up; SHARE_CONTROLLER=path)
set -uo pipefail
# shellcheck source=tests/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

controller_bin=${SHARE_CONTROLLER:?set SHARE_CONTROLLER to the share-controller binary}
work=$(mktemp -d /tmp/sharemgr-k8s-ctl.XXXXXX)
vol=pvc-ctl-a
ctl_pid=
stop_controller() {
  [[ -n $ctl_pid ]] || return 0
  kill -TERM "$ctl_pid" 2>/dev/null
  wait "$ctl_pid" 2>/dev/null
  ctl_pid=
}
kubelet_frozen=
sampler=
writer=
device_mounted=
frozen_sm=
cleanup() {
  [[ -z $kubelet_frozen ]] || kill -CONT "$kubelet_frozen"
  [[ -z $frozen_sm ]] || kill -CONT "$frozen_sm" 2>/dev/null
  [[ -z $sampler ]] || kill "$sampler" 2>/dev/null
  if [[ -n $writer ]]; then
    touch "$work/stop-writing"
    pkill -P "$writer" 2>/dev/null # its nfs-cp under timeout
    kill "$writer" 2>/dev/null
    wait "$writer" 2>/dev/null
  fi
  [[ -z $device_mounted ]] || umount "$device_mounted"
  stop_controller
  # Nothing lets the share go once the controller is gone: its finalizer
  # goes by hand, then everything it owned.
  k patch smgr "$vol" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  k delete smgr "$vol" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
  k8s_delete_share "$vol"
  k delete -f "$k8s_repo/deploy/base/rbac.yaml" --ignore-not-found >/dev/null 2>&1
  k delete -f "$k8s_repo/deploy/base/crd.yaml" --ignore-not-found --wait=true >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

start_controller() {
  "$controller_bin" --kubernetes --kubeconfig "$work/kubeconfig" \
    --pod-template "$work/template.yaml" --tls-dir "$work/tls/controller" \
    --tls-server-name share-manager >>"$work/controller.log" 2>&1 &
  ctl_pid=$!
}
controlling() { grep -q "controlling the ShareManagers of namespace default" "$work/controller.log"; }
field() { k get smgr "$vol" -o "jsonpath=$1" 2>/dev/null; }
serving_epoch() { [[ $(field '{.status.phase} {.status.epoch}') == "RUNNING $1" ]]; }
pod_gone() { ! k get pod "$1" >/dev/null 2>&1; }
share_gone() { ! k get smgr "$vol" >/dev/null 2>&1; }
service_gone() { ! k get service "$vol" >/dev/null 2>&1; }
logged() { grep -qE -- "$1" "$work/controller.log"; }
described() { k describe smgr "$vol" 2>/dev/null | grep -qE -- "$1"; }
device_unclaimed() {
  /usr/bin/python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))' "$1" 2>/dev/null
}
ended_or_new_ganesha() { # POD OLD
  local g
  g=$(k8s_ganesha_pid "$1")
  [[ -n $g && $g != "$2" ]] || [[ $(k8s_phase "$1") != Running ]]
}

# The API objects, the controller's identity, its kubeconfig (a token of its
# ServiceAccount, nothing of the admin's), the certificates and the template.
k8s_controller_setup "$work"
device=$(k8s_block_volume "$vol") || {
  fail "a block volume for $vol"
  finish
}
payload=$work/payload
head -c 3000 /dev/urandom >"$payload"

start_controller
check "share-controller starts with its ServiceAccount's rights" eventually 30 controlling
# One ganesha death allowed: the second spends the budget (below).
k apply -f - >/dev/null <<YAML
apiVersion: share-manager.io/v1alpha1
kind: ShareManager
metadata: {name: $vol}
spec: {daemonFlags: ["--max-deaths=1"]}
YAML
pod1=share-manager-$vol-e1
check "the share is RUNNING under epoch 1 in its status" eventually 120 serving_epoch 1
check "its pod $pod1 turns Ready through kubelet's probes" eventually 30 k8s_ready "$pod1"
check "kubectl get sharemanagers names the pod" \
  grep -qE "^$vol +RUNNING +1 +$pod1 " <<<"$(k get smgr "$vol" --no-headers)"
check "the share holds its finalizer while it has a pod" \
  test "$(field '{.metadata.finalizers[0]}')" = share-manager.io/pods-gone
share_uid=$(field '{.metadata.uid}')
check "the pod is owned by its ShareManager" \
  test "$(k get pod "$pod1" -o 'jsonpath={.metadata.ownerReferences[0].uid}')" = "$share_uid"
check "so is its Service" \
  test "$(k get service "$vol" -o 'jsonpath={.metadata.ownerReferences[0].uid}')" = "$share_uid"
svc=$(k8s_service_ip "$vol")
check "NFS data is written through the share's Service ($svc)" eventually 30 nfs_write "$svc" "$vol" a "$payload"
check "and read back" nfs_same "$svc" "$vol" a "$payload"

# A controller restart adopts the running pod: no churn.
uid1=$(k get pod "$pod1" -o 'jsonpath={.metadata.uid}')
stop_controller
start_controller
check "a restarted share-controller is controlling again" eventually 30 bash -c \
  "[[ \$(grep -c 'controlling the ShareManagers' '$work/controller.log') == 2 ]]"
sleep 5  # several passes of its resync
check "it adopted the pod: the same UID, no other pod, epoch 1" bash -c \
  "[[ \$(kubectl get pods -l share-manager/volume=$vol -o 'jsonpath={.items[*].metadata.uid}') == '$uid1' ]]"
check "the share still RUNNING under epoch 1" serving_epoch 1

# Seed "remount flood": the pod's ext4 turned read-only by a filesystem
# error (errors=remount-ro), twice, each repaired in the pod. Each event is
# one remount generation, acknowledged; none is asked twice, and the pod is
# kept. (A plain `mount -o remount,ro` is refused while ganesha holds files
# open for writing.)
generations() { field '{.status.remountRequestedGeneration} {.status.remountAcknowledgedGeneration}'; }
acknowledged() { [[ $(field '{.status.remountAcknowledgedGeneration}') == "$1" ]]; }
read -r req0 ack0 <<<"$(generations)"
req0=${req0:-0} ack0=${ack0:-0}
for event in 1 2; do
  echo "k8s test error $event" >"/sys/fs/ext4/$(basename "$(readlink -f "$device")")/trigger_fs_error"
  check "ext4 error $event: one generation more, acknowledged" eventually 90 acknowledged $((ack0 + event))
  check "the share RUNNING again under epoch 1" eventually 60 serving_epoch 1
done
sleep 8 # past the remount delay (5 s): a second request for either event would be out
read -r req ack <<<"$(generations)"
check "exactly one generation per event ($ack0 -> $ack acknowledged), none requested twice ($req0 -> ${req:-0})" \
  bash -c "(( $ack == $ack0 + 2 && ${req:-0} <= $ack && ${req:-0} <= $req0 + 2 ))"
check "the same pod serves: no replacement for a read-only filesystem" \
  test "$(k get pod "$pod1" -o 'jsonpath={.metadata.uid}')" = "$uid1"
check "the data reads back after both repairs" eventually 30 nfs_same "$svc" "$vol" a "$payload"

# The death budget spent: share-manager reports FAILED, saying why, and exits
# 3 with the same words as its termination message. Whichever the controller
# sees first (the status over gRPC, or the pod's end) is the reason it records.
local_g=
for _ in 1 2; do
  local_g=$(k8s_ganesha_pid "$pod1") && [[ -n $local_g ]] && kill -KILL "$local_g"
  eventually 20 ended_or_new_ganesha "$pod1" "$local_g"
done
budget_spent="ganesha pid [0-9]+ killed by signal 9 .*exceed the budget of 1"
check "the controller records ERROR with share-manager's own reason (the death budget)" \
  eventually 60 logged "$vol ERROR epoch=1 pod=$pod1 .*$budget_spent"
pod2=share-manager-$vol-e2
check "a replacement under epoch 2 is RUNNING" eventually 120 serving_epoch 2
check "kubectl describe sharemanager says why the pod was replaced (a Warning Event)" \
  eventually 30 described "Warning +Error .*$budget_spent"
check "its pod $pod2 turns Ready" eventually 30 k8s_ready "$pod2"
check "the old pod was deleted" eventually 60 pod_gone "$pod1"
check "the Service kept its address" test "$(k8s_service_ip "$vol")" = "$svc"
check "the same data reads back through it" eventually 30 nfs_same "$svc" "$vol" a "$payload"

# Seed "two active servers": kubelet frozen (SIGSTOP), the serving pod
# deleted. The API says the pod is going while its container still runs. The
# controller records that a replacement is wanted and waits, quietly (no
# status rewrites, no second pod); sampled throughout, never two
# share-manager processes for the volume. kubelet resumes: it all converges.
one_at_most_of_20() { awk '$1 > 1 {bad = 1} END {exit bad || NR < 20}' "$1"; } # FILE: >= 20 samples, none above 1
sm_count() { pgrep -fc -- "share-manager daemon .*--volume=$vol( |\$)"; }
sample_sm_count() { # FILE: sm_count every 200 ms into FILE, in the background ($sampler)
  (while :; do sm_count; sleep 0.2; done) >"$1" 2>/dev/null &
  sampler=$!
}
kubelet_pid=$(<"$SHAREMGR_K8S_DIR/pids/kubelet")
check "kubelet's pid file names kubelet" grep -q kubelet "/proc/$kubelet_pid/cmdline"
sample_sm_count "$work/sm-samples"
kubelet_frozen=$kubelet_pid
kill -STOP "$kubelet_pid"
k delete pod "$pod2" --wait=false >/dev/null
check "the API says $pod2 is going (deletionTimestamp) while kubelet is frozen" bash -c \
  "[[ -n \$(kubectl get pod $pod2 -o 'jsonpath={.metadata.deletionTimestamp}') ]]"
check "the share records ERROR: its pod is being deleted, a replacement wanted" \
  eventually 20 bash -c "kubectl get smgr $vol -o 'jsonpath={.status.phase} {.status.reason}' | grep -q '^ERROR pod $pod2 is being deleted'"
version=$(field '{.metadata.resourceVersion}')
sleep 10
check "and waits quietly: no status rewritten in 10 s" test "$(field '{.metadata.resourceVersion}')" = "$version"
check "no replacement pod while the old one may run" test "$(k get pods -l share-manager/volume=$vol -o name | wc -l)" = 1
check "its share-manager still runs (only the API knows)" test "$(sm_count)" = 1
kill -CONT "$kubelet_pid"
kubelet_frozen=
pod3=share-manager-$vol-e3
check "kubelet resumed: a replacement under epoch 3 is RUNNING" eventually 120 serving_epoch 3
check "the old pod is gone" eventually 60 pod_gone "$pod2"
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=
check "never two share-manager processes for $vol ($(wc -l <"$work/sm-samples") samples)" \
  one_at_most_of_20 "$work/sm-samples"
check "the same data reads back through the Service" eventually 30 nfs_same "$svc" "$vol" a "$payload"
pod2=$pod3

# A frozen share-manager (SIGSTOP). The controller finds it unreachable past
# --unhealthy-grace and deletes its pod; kubelet stops the container (SIGTERM,
# which a stopped process never acts on, then SIGKILL after the pod's grace
# period), and its liveness probe, failing meanwhile, finds the pod already
# going: both end the same container, never a second one. One replacement,
# epoch 4, never two share-managers for the volume.
sm_pid=$(k8s_share_manager_pid "$pod2")
check "the serving pod's share-manager is a process on the node ($sm_pid)" test -n "$sm_pid"
sample_sm_count "$work/sm-samples-frozen"
frozen_sm=$sm_pid
frozen_at=$(now_ms)
kill -STOP "$sm_pid"
check "the controller finds it unreachable: the share records ERROR" eventually 30 bash -c \
  "[[ \$(kubectl get smgr $vol -o 'jsonpath={.status.phase}') == ERROR ]]"
check "and deletes its pod (deletionTimestamp)" eventually 30 bash -c \
  "[[ -n \$(kubectl get pod $pod2 -o 'jsonpath={.metadata.deletionTimestamp}') ]]"
pod4=share-manager-$vol-e4
check "a replacement under epoch 4 is RUNNING" eventually 180 serving_epoch 4
echo "bench: share-manager SIGSTOP -> a replacement RUNNING: $(($(now_ms) - frozen_at)) ms"
check "the frozen pod is gone" eventually 60 pod_gone "$pod2"
frozen_sm=
check "its pod $pod4 turns Ready" eventually 30 k8s_ready "$pod4"
sleep 5
check "one replacement only: epoch 4 five seconds on" serving_epoch 4
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=
check "never two share-manager processes for $vol ($(wc -l <"$work/sm-samples-frozen") samples)" \
  one_at_most_of_20 "$work/sm-samples-frozen"
check "the same data reads back through the Service" eventually 30 nfs_same "$svc" "$vol" a "$payload"
pod2=$pod4

# Deleting the share while a client writes through its Service: held until
# its pod is gone and the device released, and every write the client was
# told succeeded is on the device (read with it mounted read-only, its
# journal not replayed: a clean release leaves nothing to replay).
write_until_stopped() {
  local n=0
  while [[ ! -e $work/stop-writing ]]; do
    n=$((n + 1))
    echo "w-$n" >>"$work/tried"
    if nfs_write "$svc" "$vol" "w-$n" "$payload"; then echo "w-$n" >>"$work/acked"; fi
    sleep 0.2
  done
}
every_acked_write_kept() {
  local name
  while read -r name; do
    cmp -s "$work/device/$name" "$payload" || {
      echo "acknowledged write $name is not on the device" >&2
      return 1
    }
  done <"$work/acked"
}
: >"$work/acked"
: >"$work/tried"
write_until_stopped &
writer=$!
check "a client writes through the Service" eventually 30 test -s "$work/acked"
acked_before=$(wc -l <"$work/acked")
tried_before=$(wc -l <"$work/tried")
k delete smgr "$vol" --wait=false >/dev/null
check "the deleted share is held (deletionTimestamp, finalizer) while its pod exists" bash -c \
  "[[ -n \$(kubectl get smgr $vol -o 'jsonpath={.metadata.deletionTimestamp}') ]] && kubectl get pod $pod2 >/dev/null 2>&1"
check "its pod goes" eventually 90 pod_gone "$pod2"
touch "$work/stop-writing"
wait "$writer" 2>/dev/null
writer=
check "the client was writing as the share was deleted ($(($(wc -l <"$work/tried") - tried_before)) tries begun after the last before it)" \
  test "$(wc -l <"$work/tried")" -gt "$tried_before"
check "then the share object goes" eventually 30 share_gone
check "the device is released (no one holds $device)" device_unclaimed "$device"
mkdir -p "$work/device"
check "the released device mounts read-only" mount -o ro,noload "$device" "$work/device"
device_mounted=$work/device
check "all $(wc -l <"$work/acked") acknowledged writes ($acked_before before the delete) are on it" \
  every_acked_write_kept
umount "$work/device"
device_mounted=
check "the Service goes with its owner" eventually 60 service_gone
check "the controller never crashed" kill -0 "$ctl_pid"
if ((failures)); then
  echo "--- share-controller's log (last 40 lines)"
  tail -n 40 "$work/controller.log"
fi
finish
