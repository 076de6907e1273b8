#!/usr/bin/env bash
# share-controller deployed as an operator deploys it: `kubectl apply -k` of
# an overlay on deploy/base (the CRD, RBAC, the controller's Deployment and
# the pod template's ConfigMap), the controller's own image and probes. Three
# ShareManagers get their pods, Ready through kubelet's probes and RUNNING in
# their status; NFS data goes through a share's Service. The controller's two
# replicas elect one leader on a Lease: SIGKILLed, the other leads and
# replaces nothing; SIGSTOPped past its Lease, the other leads, and woken the
# frozen one exits 3 having written nothing the apiserver accepted once the
# other led (its audit log says). kube-apiserver stopped for 15 s: NFS is
# served throughout, and after it one replica leads again with no pod
# replaced. Then a new
# share-manager image tag in the template (the same `apply -k`): the
# Deployment rolls the controller, which rolls the three shares one at a
# time. Sampled throughout: at most one share not RUNNING, never two running
# share-manager containers for one volume. Each share ends under epoch 2 on
# the new image, and the data reads back.
#
# Usage: tests/k8s/deploy_test.sh   (root; a cluster up, the controller image
#   imported as localhost/share-controller:k8s-test by the fixture)
set -uo pipefail
# shellcheck source=tests/k8s/lib.sh
source "$(dirname "$0")/lib.sh"

controller_image=${SHARE_CONTROLLER_K8S_IMAGE:-localhost/share-controller:k8s-test}
next_image=localhost/share-manager:k8s-next
work=$(mktemp -d /tmp/sharemgr-k8s-deploy.XXXXXX)
shares=(pvc-dep-a pvc-dep-b pvc-dep-c)
sampler_pid=
frozen_pid=
cleanup() {
  [[ -z $frozen_pid ]] || kill -CONT "$frozen_pid" 2>/dev/null
  [[ -z $sampler_pid ]] || kill "$sampler_pid" 2>/dev/null
  # The controller lets each deleted share go once its pod is gone.
  k delete smgr "${shares[@]}" --ignore-not-found --wait=true --timeout=90s >/dev/null 2>&1
  # Whatever it could not (it failed): the finalizers by hand.
  for vol in "${shares[@]}"; do
    k patch smgr "$vol" --type merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
  done
  k delete -k "$work/overlay" --ignore-not-found --wait=true --timeout=90s >/dev/null 2>&1
  # The first template's ConfigMap: the second apply made one of another name.
  k get configmap -o name 2>/dev/null | grep '/share-manager-pod-template-' |
    xargs -r kubectl delete --ignore-not-found >/dev/null 2>&1
  for vol in "${shares[@]}"; do k8s_delete_share "$vol"; done
  k delete secret share-controller-tls share-manager-tls --ignore-not-found >/dev/null 2>&1
  ctr --address "$SHAREMGR_K8S_CONTAINERD" -n k8s.io images rm "$next_image" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

field() { k get smgr "$1" -o "jsonpath=$2" 2>/dev/null; }
serving_epoch() { [[ $(field "$1" '{.status.phase} {.status.epoch}') == "RUNNING $2" ]]; }
all_serving_epoch() {
  local vol
  for vol in "${shares[@]}"; do serving_epoch "$vol" "$1" || return 1; done
}
controller_pod() {
  k get pods -l app.kubernetes.io/name=share-controller --field-selector=status.phase=Running \
    -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null
}
controller_ready() {
  [[ $(k get deployment share-controller -o 'jsonpath={.status.readyReplicas}/{.status.updatedReplicas}/{.status.replicas}' 2>/dev/null) == 2/2/2 ]]
}
image_of() { k get pod "$(k8s_pod_name "$1" "$2")" -o 'jsonpath={.spec.containers[0].image}' 2>/dev/null; }

# The overlay an operator writes: the images, and the pod template with this
# node's pod network as --nfs-clients.
overlay() { # TEMPLATE_IMAGE
  mkdir -p "$work/overlay"
  k8s_render share-manager-pod.yaml pvc-example 1 "s|image: $k8s_image|image: $1|" \
    >"$work/overlay/share-manager-pod.yaml" 2>/dev/null
  cat >"$work/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: default
resources:
  - $(realpath --relative-to="$work/overlay" "$k8s_repo/deploy/base")
images:
  - name: share-controller
    newName: ${controller_image%:*}
    newTag: ${controller_image##*:}
configMapGenerator:
  - name: share-manager-pod-template
    behavior: replace
    files: [share-manager-pod.yaml]
patches:
  # Imported into the node, never pulled.
  - target: {kind: Deployment, name: share-controller}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
YAML
}

column_at_most() { # COLUMN MAX FILE: no line's COLUMN above MAX
  awk -v c="$1" -v max="$2" '$c > max {bad = 1} END {exit bad}' "$3"
}

# Every 300 ms: how many shares are not RUNNING, and the most running
# share-manager containers any one volume has. Each list is one read of the
# apiserver, consistent across its objects.
sample() {
  while :; do
    local phases running
    phases=$(k get smgr -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}' 2>/dev/null) || { sleep 0.3; continue; }
    running=$(k get pods -l app.kubernetes.io/name=share-manager -o \
      'jsonpath={range .items[*]}{.metadata.labels.share-manager/volume}{" "}{.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}' 2>/dev/null) || { sleep 0.3; continue; }
    echo "$(grep -v '^RUNNING$' <<<"$phases" | grep -c .) $(awk 'NF == 2 {n[$1]++} END {m = 0; for (v in n) if (n[v] > m) m = n[v]; print m}' <<<"$running")"
    sleep 0.3
  done
}

k8s_tls_files "$work/tls"
k8s_tls_secret "$work/tls"
k create secret generic share-controller-tls --from-file="$work/tls/controller/tls.crt" \
  --from-file="$work/tls/controller/tls.key" --from-file="$work/tls/controller/ca.crt" >/dev/null
for vol in "${shares[@]}"; do
  k8s_block_volume "$vol" >/dev/null || fail "a block volume for $vol"
done
overlay "$k8s_image"
if ! out=$(k apply -k "$work/overlay" 2>&1); then
  fail "kubectl apply -k of an overlay on deploy/base: $out"
  finish
fi
pass "kubectl apply -k of an overlay on deploy/base"
check "the CRD is established" k wait --for condition=established crd/sharemanagers.share-manager.io --timeout=60s
check "the controller's Deployment is Ready through its probes (/healthz, /readyz)" \
  eventually 120 controller_ready
ctl1=$(controller_pod)
check "the controller runs as uid 65532 on a read-only root filesystem" bash -c \
  "[[ \$(kubectl get pod $ctl1 -o 'jsonpath={.spec.securityContext.runAsUser} {.spec.containers[0].securityContext.readOnlyRootFilesystem}') == '65532 true' ]]"
for vol in "${shares[@]}"; do
  check "ShareManager $vol is created" k apply -f - <<YAML
apiVersion: share-manager.io/v1alpha1
kind: ShareManager
metadata: {name: $vol}
# A new pod's ganesha refuses OPEN to the old one's clients for its grace
# period (issue "What a client sees after a restart"): short here.
spec: {daemonFlags: ["--lease-lifetime=10", "--grace-period=10"]}
YAML
done
check "the three shares are RUNNING under epoch 1" eventually 180 all_serving_epoch 1
for vol in "${shares[@]}"; do
  check "$vol's pod is Ready through kubelet's probes" eventually 30 k8s_ready "$(k8s_pod_name "$vol" 1)"
done
written=${shares[0]}
svc=$(k8s_service_ip "$written")
payload=$work/payload
head -c 3000 /dev/urandom >"$payload"
check "NFS data is written through $written's Service ($svc)" eventually 30 nfs_write "$svc" "$written" a "$payload"
check "and read back" nfs_same "$svc" "$written" a "$payload"
scrape=$(k get --raw "/api/v1/namespaces/default/pods/$(k8s_leader):9700/proxy/metrics" 2>/dev/null)
check "the leading controller's /metrics counts the three shares RUNNING" \
  grep -q '^sharemgr_controller_shares{phase="RUNNING"} 3$' <<<"$scrape"

# The two replicas: one leads (the Lease names it), the other stands by.
leader_other_than() { # POD: someone else leads
  local now
  now=$(k8s_leader)
  [[ -n $now && $now != "$1" ]]
}
replica_pid() { pgrep -f -- "--replica-id=$1( |\$)" | head -n 1; } # POD: its share-controller's host pid
controller_pods() { k get pods -l app.kubernetes.io/name=share-controller -o 'jsonpath={.items[*].metadata.name}'; }
share_pod_uids() { k get pods -l app.kubernetes.io/name=share-manager -o 'jsonpath={.items[*].metadata.uid}'; }
# POD [SINCE]: it leads and reconciles, by a line of its log since SINCE
# (RFC 3339; kubectl serves a crashed container's log until it runs again).
acting() { k logs "$1" ${2:+"--since-time=$2"} 2>/dev/null | grep -q 'controlling the ShareManagers'; }
leader_acting() { # [SINCE]
  local pod
  pod=$(k8s_leader) && [[ -n $pod ]] && acting "$pod" "$@"
}
utc_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
exited_not_leader() { # POD: its container's last run ended with exit 3
  [[ $(k get pod "$1" -o 'jsonpath={.status.containerStatuses[0].lastState.terminated.exitCode}' 2>/dev/null) == 3 ]]
}
# OLD NEW SINCE: OLD's accepted writes (before; none after NEW's first
# accepted write at or after SINCE), by each replica's user agent in the
# apiserver's audit log.
writes_after() {
  /usr/bin/python3 - "$SHAREMGR_K8S_DIR/audit.log" "$@" <<'PY'
import json, sys
log, old, new, since = sys.argv[1:]
def by(event, pod):
    agent = event.get("userAgent", "")
    return agent == "share-controller/" + pod or agent.startswith("share-controller/" + pod + " ")
events = []
with open(log) as f:
    for line in f:
        e = json.loads(line)
        if e.get("stage") == "ResponseComplete" and 200 <= e.get("responseStatus", {}).get("code", 0) < 300:
            events.append(e)
first = min((e["requestReceivedTimestamp"] for e in events
             if by(e, new) and e["requestReceivedTimestamp"] >= since), default=None)
if first is None:
    sys.exit(f"no accepted write of {new} since {since}")
before = sum(1 for e in events if by(e, old) and e["requestReceivedTimestamp"] < first)
late = [f'{e["verb"]} {e["requestURI"]} at {e["requestReceivedTimestamp"]}' for e in events
        if by(e, old) and e["requestReceivedTimestamp"] >= first]
print(f"{old}: {before} accepted writes before {new}'s first ({first}), {len(late)} after")
if before == 0 or late:
    sys.exit("\n".join(late) or f"no accepted write of {old} at all: the log proves nothing")
PY
}
uids_before=$(share_pod_uids)
check "a replica leads and acts" eventually 30 leader_acting
lead1=$(k8s_leader)
check "the Lease names $lead1, one of the two" grep -qw -- "$lead1" <<<"$(controller_pods)"
pid1=$(replica_pid "$lead1")
check "the leader's share-controller is a process on the node ($pid1)" test -n "$pid1"
killed_at=$(now_ms) killed_utc=$(utc_now)
kill -KILL "$pid1"
check "SIGKILLed, the other replica leads" eventually 30 leader_other_than "$lead1"
lead2=$(k8s_leader)
echo "bench: share-controller leader SIGKILL -> the other replica holds the Lease: $(($(now_ms) - killed_at)) ms"
check "and acts" eventually 30 acting "$lead2" "$killed_utc"
check "the killed replica is back, standing by: both Ready" eventually 60 controller_ready
check "no share-manager pod was replaced" test "$(share_pod_uids)" = "$uids_before"
pid2=$(replica_pid "$lead2")
check "the new leader's process is found ($pid2)" test -n "$pid2"
since=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ) stopped_utc=$(utc_now)
frozen_pid=$pid2
kill -STOP "$pid2"
check "SIGSTOPped past its Lease, the other replica leads again" eventually 30 leader_other_than "$lead2"
check "and acts" eventually 30 acting "$lead1" "$stopped_utc"
kill -CONT "$pid2"
frozen_pid=
check "woken, the frozen leader exits 3 (not leader)" eventually 30 exited_not_leader "$lead2"
check "the apiserver accepted no write of $lead2 once $lead1 led" writes_after "$lead2" "$lead1" "$since"
check "both replicas Ready again" eventually 60 controller_ready
check "still no share-manager pod replaced" test "$(share_pod_uids)" = "$uids_before"
check "the shares stayed RUNNING under epoch 1" all_serving_epoch 1

# kube-apiserver stopped (SIGSTOP) for 15 s. The share-managers need it for
# nothing: NFS is served through the Service all along. The leader cannot
# renew its Lease: it stops acting when its Lease runs out (exit 3) and
# kubelet restarts it. Once the apiserver is back, one replica leads again on
# what it lists then, and no share-manager pod was replaced.
api_pid=$(<"$SHAREMGR_K8S_DIR/pids/kube-apiserver")
if ! grep -q kube-apiserver "/proc/$api_pid/cmdline" 2>/dev/null; then
  fail "kube-apiserver's pid file names it (pid $api_pid)"
  finish
fi
pass "kube-apiserver's pid file names it"
frozen_pid=$api_pid
kill -STOP "$api_pid"
sleep 10
check "NFS is served through $written's Service 10 s into the apiserver's outage" \
  nfs_same "$svc" "$written" a "$payload"
sleep 5
kill -CONT "$api_pid"
frozen_pid=
back_utc=$(utc_now)
check "the apiserver answers again" eventually 30 k get --raw /readyz
check "the leader through the outage stopped acting when its Lease ran out (exit 3)" \
  eventually 60 exited_not_leader "$lead1"
check "a replica leads again and acts" eventually 120 leader_acting "$back_utc"
check "no share-manager pod was replaced through the outage" test "$(share_pod_uids)" = "$uids_before"
check "the shares are RUNNING under epoch 1" eventually 30 all_serving_epoch 1
check "both replicas Ready after the outage" eventually 120 controller_ready
ctls_before=$(controller_pods)

# A new share-manager image: the same image under a new tag, so that only
# the template changes.
# Tagged in the node's containerd: the fixture keeps no podman tag of it.
check "the node's image is tagged anew ($next_image)" \
  ctr --address "$SHAREMGR_K8S_CONTAINERD" -n k8s.io images tag --force "$k8s_image" "$next_image"
sample >"$work/samples" &
sampler_pid=$!
overlay "$next_image"
check "kubectl apply -k of the new template" k apply -k "$work/overlay"
rolled() { # both replicas new and Ready
  local pod
  for pod in $(controller_pods); do grep -qw -- "$pod" <<<"$ctls_before" && return 1; done
  controller_ready
}
check "the Deployment rolled both replicas, one at a time (new pods, Ready)" eventually 180 rolled
check "the new controller rolls every share to epoch 2" eventually 300 all_serving_epoch 2
kill "$sampler_pid" 2>/dev/null
wait "$sampler_pid" 2>/dev/null
sampler_pid=
for vol in "${shares[@]}"; do
  check "$vol runs the new image under epoch 2" test "$(image_of "$vol" 2)" = "$next_image"
  check "$vol's rollout is recorded done (RollingOut False)" test \
    "$(field "$vol" '{.status.conditions[?(@.type=="RollingOut")].status}')" = False
  replaced=$(field "$vol" '{.status.replacements}')
  check "$vol's rollout was no failure (replacements ${replaced:-0})" test "${replaced:-0}" = 0
done
samples=$(wc -l <"$work/samples")
check "the rollout was sampled ($samples samples)" test "$samples" -ge 5
check "at most one share was not RUNNING at any sample" column_at_most 1 1 "$work/samples"
check "some sample saw a share between pods (the sampler sees rollouts)" \
  grep -q '^1 ' "$work/samples"
check "never two running share-manager containers for one volume" column_at_most 2 1 "$work/samples"
check "the same data reads back through $written's Service" eventually 90 nfs_same "$svc" "$written" a "$payload"
ctl2=$(k8s_leader)
check "neither new replica was restarted (liveness held)" bash -c \
  "[[ \$(kubectl get pods -l app.kubernetes.io/name=share-controller -o 'jsonpath={.items[*].status.containerStatuses[0].restartCount}') == '0 0' ]]"
if ((failures)); then
  echo "--- samples (not RUNNING, most running containers of a volume)"
  sort "$work/samples" | uniq -c
  echo "--- share-controller's log (last 40 lines)"
  k logs "$ctl2" --tail=40 2>&1
fi
finish
