# shellcheck shell=bash
# What the k8s tests share: the running cluster's environment (tests/k8s/cluster.sh
# up), checks that count failures, the shipped pod rendered for one share, and a
# look inside the node (containerd's tasks, kubelet's metrics).
# Sourced by tests/k8s/*_test.sh; needs SHAREMGR_K8S_DIR of a cluster that is up.

k8s_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
k8s_dir=${SHAREMGR_K8S_DIR:-/run/sharemgr-k8s}
if [[ ! -f $k8s_dir/env ]]; then
  echo "FAIL no test cluster is up in $k8s_dir: the fixture 'k8s cluster up' failed (its output says which step)" >&2
  exit 1
fi
# shellcheck disable=SC1091
source "$k8s_dir/env"

failures=0
pass() { echo "ok   $*"; }
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
  if ((failures)); then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
}
now_ms() { date +%s%3N; }
eventually() { # eventually SECONDS COMMAND...: every 100 ms until it succeeds
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  until "$@"; do
    (($(now_ms) < deadline)) || return 1
    sleep 0.1
  done
}

k() { kubectl --request-timeout=20s "$@"; }

# min / median / max of the numbers on stdin (blank lines skipped), as
# "min M, median M, max M (n N)": the benchmarks' summaries.
stats() {
  grep . | sort -g | awk '{v[NR] = $1} END {
    if (NR == 0) {print "no runs"; exit}
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "min %.1f, median %.1f, max %.1f (n %d)\n", v[1], m, v[NR], NR}'
}

# The image under test, imported into the node by the fixture.
k8s_image=${SHARE_MANAGER_K8S_IMAGE:-localhost/share-manager:k8s-test}

# ---------------------------------------------------------------- a share's objects

# k8s_controller_kubeconfig FILE: a kubeconfig with a token of the
# share-controller ServiceAccount (deploy/base/rbac.yaml applied), nothing of
# the admin's, namespace default.
k8s_controller_kubeconfig() {
  local token server ca
  token=$(k create token share-controller --duration=1h) || return 1
  server=$(kubectl config view --raw --minify -o 'jsonpath={.clusters[0].cluster.server}')
  ca=$(kubectl config view --raw --minify --flatten -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}')
  cat >"$1" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: share-controller, user: {token: "$token"}}]
contexts: [{name: test, context: {cluster: test, user: share-controller, namespace: default}}]
current-context: test
YAML
}

# k8s_controller_setup DIR: what share-controller on the host needs: the CRD
# (established) and its RBAC applied, DIR/kubeconfig of its ServiceAccount,
# DIR/tls (k8s_tls_files, and the pods' Secret from it) and DIR/template.yaml,
# the shipped pod rendered for this node.
k8s_controller_setup() {
  k apply -f "$k8s_repo/deploy/base/crd.yaml" >/dev/null
  k wait --for condition=established crd/sharemanagers.share-manager.io --timeout=30s >/dev/null
  k apply -f "$k8s_repo/deploy/base/rbac.yaml" >/dev/null
  k8s_controller_kubeconfig "$1/kubeconfig"
  k8s_tls_files "$1/tls"
  k8s_tls_secret "$1/tls"
  k8s_render share-manager-pod.yaml pvc-example 1 >"$1/template.yaml" 2>/dev/null
}

# k8s_tls_files DIR: a throwaway CA (DIR/ca.crt, ca.key), the pods'
# certificate with DNS SAN share-manager (DIR/tls.crt, tls.key) and the
# controller's client certificate with DNS SAN share-controller
# (DIR/controller/{tls.crt,tls.key,ca.crt}: a --tls-dir).
k8s_tls_files() {
  local d=$1 name
  mkdir -p "$d/controller"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=k8s-test-ca \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  for name in share-manager share-controller; do
    local out=$d usage=serverAuth
    [[ $name == share-controller ]] && out=$d/controller usage=clientAuth
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout "$out/tls.key" \
      -out "$out/tls.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s\nextendedKeyUsage=%s\n' "$name" "$usage" >"$out/ext"
    openssl x509 -req -in "$out/tls.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
      -days 1 -extfile "$out/ext" -out "$out/tls.crt" 2>/dev/null
  done
  cp "$d/ca.crt" "$d/controller/ca.crt"
}

# k8s_tls_secret [DIR]: the share-manager-tls Secret the pod mounts, from DIR
# as k8s_tls_files made it (replacing one made before), or, without DIR,
# from a CA of its own when there is no such Secret yet.
k8s_tls_secret() {
  local d=${1:-}
  if [[ -z $d ]]; then
    k get secret share-manager-tls >/dev/null 2>&1 && return 0
    d=$(mktemp -d)
    k8s_tls_files "$d"
    k8s_tls_secret "$d"
    rm -rf "$d"
    return
  fi
  k delete secret share-manager-tls --ignore-not-found >/dev/null
  k create secret generic share-manager-tls --from-file="$d/tls.crt" --from-file="$d/tls.key" \
    --from-file="$d/ca.crt" >/dev/null
}

# k8s_block_volume VOLUME [SIZE [MKFS.EXT4 OPTIONS...]]: an ext4 loop device (192M
# unless SIZE says otherwise) as a local block PersistentVolume and its claim,
# named VOLUME, bound to this node.
k8s_block_volume() {
  local vol=$1 size=${2:-192M} dev
  shift 2 || shift $#
  dev=$(bash "$k8s_repo/tests/k8s/cluster.sh" block-device "$vol" "$size" "$SHAREMGR_K8S_DIR")
  mkfs.ext4 -q -F "$@" "$dev"
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $vol
spec:
  capacity: {storage: $size}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: sharemgr-local
  claimRef: {namespace: default, name: $vol}
  local: {path: $dev}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/hostname, operator: In, values: [$SHAREMGR_K8S_NODE]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $vol
spec:
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  storageClassName: sharemgr-local
  volumeName: $vol
  resources: {requests: {storage: $size}}
YAML
  echo "$dev"
}

# k8s_render FILE VOLUME [EPOCH] [SED-EXPRESSION...]: a shipped manifest with its
# placeholders filled for VOLUME (the example volume's name, the image, the
# epoch, the nodes' network), then each extra sed expression applied. The
# node reaches pods from its address on the pod bridge too (kube-proxy
# rewrites a ClusterIP's client to it), so --nfs-clients gets that as well.
k8s_render() {
  local file=$1 vol=$2 epoch=${3:-1}
  shift 3 || shift $#
  # imagePullPolicy Never: an image that was not imported fails at once.
  local exprs=(-e "s|pvc-example|$vol|g"
    -e "s|^\( *\)image: share-manager:dev$|\1image: $k8s_image\n\1imagePullPolicy: Never|"
    -e "s|--epoch=1$|--epoch=$epoch|" -e "s|share-manager-$vol\$|share-manager-$vol-e$epoch|"
    -e "s|^\( *\)- --nfs-clients=REPLACE_WITH_NODE_CIDR$|&\n\1- --nfs-clients=$SHAREMGR_K8S_NODE_POD_IP/32|"
    -e "s|REPLACE_WITH_NODE_CIDR|$SHAREMGR_K8S_NODE_CIDR|g")
  # A container cannot get a capability the node's own bounding set lacks
  # (runc: "unable to apply caps"). These machines lack CAP_SYS_RESOURCE
  # (bit 24), which the pod asks for only to grow ext4 online.
  if ! node_has_capability 24; then
    exprs+=(-e '/^ *- SYS_RESOURCE$/d')
    echo "note: this node's bounding set lacks CAP_SYS_RESOURCE: the pod runs without it (no online ext4 grow)" >&2
  fi
  local e
  for e in "$@"; do exprs+=(-e "$e"); done
  sed "${exprs[@]}" "$k8s_repo/container/k8s/$file"
}

node_has_capability() { # BIT: in this machine's capability bounding set
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  (((0x$bnd >> $1) & 1))
}

k8s_pod_name() { echo "share-manager-$1-e${2:-1}"; }

# k8s_share VOLUME [EPOCH] [SED...]: the pod (and its Service, once) for VOLUME.
k8s_share() {
  local vol=$1 epoch=${2:-1}
  shift 2 || shift $#
  k8s_render share-manager-pod.yaml "$vol" "$epoch" "$@" | k apply -f - >/dev/null
  k get service "$vol" >/dev/null 2>&1 ||
    k8s_render share-manager-service.yaml "$vol" | k apply -f - >/dev/null
}

k8s_ready() { # k8s_ready POD
  [[ $(k get pod "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
k8s_wait_ready() { eventually "${2:-90}" k8s_ready "$1"; }

k8s_phase() { k get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null; }

# Which share-controller replica leads: the holder of its Lease.
k8s_leader() { k get lease share-controller -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null; }

k8s_delete_share() { # k8s_delete_share VOLUME: its pods, Service, claim and volume
  local vol=$1
  k delete pod -l "share-manager/volume=$vol" --wait=true --timeout=60s >/dev/null 2>&1
  k delete service "$vol" --ignore-not-found >/dev/null 2>&1
  k delete networkpolicy "share-manager-$vol-e1" --ignore-not-found >/dev/null 2>&1
  k delete pvc "$vol" --ignore-not-found --wait=true --timeout=30s >/dev/null 2>&1
  k delete pv "$vol" --ignore-not-found --wait=true --timeout=30s >/dev/null 2>&1
}

# ---------------------------------------------------------------- inside the node

k8s_container_id() { # POD: containerd's id of its share-manager container
  k get pod "$1" -o 'jsonpath={.status.containerStatuses[0].containerID}' | sed 's|^containerd://||'
}
k8s_started_at() {
  k get pod "$1" -o 'jsonpath={.status.containerStatuses[0].state.running.startedAt}'
}
k8s_pod_ip() { k get pod "$1" -o 'jsonpath={.status.podIP}'; }
k8s_service_ip() { k get service "$1" -o 'jsonpath={.spec.clusterIP}'; }

# The host pid of share-manager in POD (the container's first process).
k8s_share_manager_pid() {
  local id
  id=$(k8s_container_id "$1")
  [[ -n $id ]] || return 1
  ctr --address "$SHAREMGR_K8S_CONTAINERD" -n k8s.io tasks ls 2>/dev/null | awk -v id="$id" '$1 == id {print $2}'
}
# ganesha.nfsd, share-manager's child, as a host pid.
k8s_ganesha_pid() {
  local sm
  sm=$(k8s_share_manager_pid "$1") || return 1
  [[ -n $sm ]] || return 1
  pgrep -P "$sm" -x ganesha.nfsd
}

# kubelet's own endpoints, through the apiserver's node proxy.
k8s_kubelet_get() { k get --raw "/api/v1/nodes/$SHAREMGR_K8S_NODE/proxy/$1"; }

# How many of POD's probes of TYPE ended with RESULT (successful, failed) by
# kubelet's count (prober_probe_total). Fails, rather than say 0, when kubelet
# cannot be read.
k8s_probe_count() { # POD TYPE RESULT
  local metrics try
  for try in 1 2 3; do
    metrics=$(k8s_kubelet_get metrics/probes) && break
    [[ $try == 3 ]] && return 1
    sleep 1
  done
  awk -v pod="$1" -v type="$2" -v result="$3" '
    $1 ~ /^prober_probe_total\{/ && index($1, "pod=\"" pod "\"") && index($1, "probe_type=\"" type "\"") &&
      index($1, "result=\"" result "\"") {s += $2} END {print s + 0}' <<<"$metrics"
}
k8s_probe_failures() { k8s_probe_count "$1" "$2" failed; }
k8s_probe_successes() { k8s_probe_count "$1" "$2" successful; }

# Events about POD with REASON (e.g. Unhealthy, Killing), as "reason: message" lines.
k8s_events() { # POD [REASON]: of this pod, not of an earlier one of the same name
  local uid
  uid=$(k get pod "$1" -o 'jsonpath={.metadata.uid}') || return 1
  k get events --field-selector "involvedObject.uid=$uid${2:+,reason=$2}" \
    -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null
}

# ---------------------------------------------------------------- NFS through the cluster

# nfs_url ADDRESS VOLUME FILE
nfs_url() { echo "nfs://$1/$2/$3?version=4&nfsport=2049"; }
# nfs_write ADDRESS VOLUME FILE LOCAL: a new file with LOCAL's bytes
nfs_write() { timeout 10 nfs-cp "$4" "$(nfs_url "$1" "$2" "$3")" >/dev/null 2>&1; }
# nfs_same ADDRESS VOLUME FILE LOCAL: the file reads back as LOCAL's bytes
nfs_same() {
  local got
  got=$(mktemp)
  timeout 10 nfs-cat "$(nfs_url "$1" "$2" "$3")" >"$got" 2>/dev/null && cmp -s "$got" "$4"
  local rc=$?
  rm -f "$got"
  return $rc
}
# nfs_lists ADDRESS VOLUME FILE: a READDIR of the export shows FILE
nfs_lists() { timeout 10 nfs-ls "$(nfs_url "$1" "$2" "")" 2>/dev/null | grep -q " $3\$"; }
