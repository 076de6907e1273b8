#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, for the tests and for trying
# the pod by hand: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kube-proxy (iptables), kubelet, containerd + runc, a bridge
# CNI pod network. Everything lives in one state directory; `down` takes it
# all away again, pass or fail.
#
#   tests/k8s/cluster.sh up [DIR]        build (once, cached) and start; prints the env
#   tests/k8s/cluster.sh env [DIR]       KUBECONFIG and the cluster's addresses, as shell
#   tests/k8s/cluster.sh import-image TAG [DIR]   a podman (vfs) image into the node
#   tests/k8s/cluster.sh block-device NAME SIZE [DIR]  a loop device the node can use
#   tests/k8s/cluster.sh down [DIR]      stop everything and remove every trace
#
# DIR defaults to $SHAREMGR_K8S_DIR or /run/sharemgr-k8s.
#
# Network: traffic stays on this machine. The cluster takes a free /16 of
# 10.0.0.0/8 (checked against `ip route`), blackholed as a whole; inside it a
# /24 on a bridge of its own carries the node's address (the apiserver cannot
# advertise loopback), a /24 is the pods' (on the CNI bridge, no masquerade)
# and a /24 is the services' (routed onto the node's bridge, where nothing
# answers unless kube-proxy rewrote the packet). A FORWARD rule drops, and
# counts, anything that would leave the cluster's range; `down` reports it.
set -Eeuo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/k8s/versions.env
source "$here/versions.env"

cmd=${1:-}
shift || true

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
log() { echo "cluster.sh: $*" >&2; }
now_ms() { date +%s%3N; }

# The state directory: absolute, normalized, and a directory of its own under
# /run, /tmp or /var/tmp (down removes it whole).
state_dir_arg() {
  local d
  d=$(realpath -m "${1:-${SHAREMGR_K8S_DIR:-/run/sharemgr-k8s}}")
  [[ $d =~ ^/(run|tmp|var/tmp)/[A-Za-z0-9._-]+$ ]] ||
    die "state directory '$d' must be one name under /run, /tmp or /var/tmp (e.g. /run/sharemgr-k8s)"
  echo "$d"
}
MARKER=.sharemgr-k8s-cluster

NODE_NAME=sharemgr-node
# Non-standard ports, all bound to loopback or to the node's own address.
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=26443
KCM_PORT=20257
SCHED_PORT=20259
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
PROXY_HEALTHZ_PORT=20256
PROXY_METRICS_PORT=20249
NODE_BRIDGE=smk8s-node0
CNI_BRIDGE=smk8s-cni0
DROP_CHAIN=SMK8S-EGRESS
# What kubelet and kube-proxy may change; `down` puts every one back.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
  net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max)

# ---------------------------------------------------------------- network

ip4_int() { # dotted quad -> integer
  local a b c d
  IFS=. read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# A /16 of 10.0.0.0/8 that no route or address on this machine overlaps (the
# default route overlaps nothing: it is what every other route beats).
pick_range() {
  local second dest net len lo hi cand_lo cand_hi taken
  local routes
  routes=$(ip -4 route show table all | awk '{d = ($1 ~ /^(blackhole|unreachable|prohibit|local|broadcast|multicast|throw)$/) ? $2 : $1; if (d != "default") print d}'
    ip -4 -o addr show | awk '{print $4}')
  for second in 213 214 215 216 217 218 219 220; do
    cand_lo=$(ip4_int "10.$second.0.0")
    cand_hi=$((cand_lo + 65535))
    taken=0
    while read -r dest; do
      [[ -n $dest ]] || continue
      net=${dest%/*}
      len=${dest#*/}
      [[ $dest == */* ]] || len=32
      [[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
      lo=$(ip4_int "$net")
      lo=$((lo & ~((1 << (32 - len)) - 1) & 0xffffffff))
      hi=$((lo + (1 << (32 - len)) - 1))
      if ((lo <= cand_hi && hi >= cand_lo)); then
        taken=1
        break
      fi
    done <<<"$routes"
    if ((taken == 0)); then
      echo "10.$second"
      return 0
    fi
  done
  return 1
}

# ---------------------------------------------------------------- processes

# start NAME COMMAND...: runs it detached (its own session, output to a log,
# nothing inherited that a test runner waits on) and records its pid.
start() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$DIR/log/$name.log" 2>&1 &
  echo $! >"$DIR/pids/$name"
}

# The pid recorded for NAME, if it is still that program.
live_pid() {
  local f="$DIR/pids/$1" pid exe
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ $exe == "$(<"$DIR/pids/$1.exe")" ]] || return 1
  echo "$pid"
}

started() { # started NAME BINARY: remembers which binary the pid must be
  readlink -f "$2" >"$DIR/pids/$1.exe"
}

stop_pid_name() { # stop_pid_name NAME SECONDS
  local pid i
  pid=$(live_pid "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
}

wait_for() { # wait_for SECONDS WHAT COMMAND...
  local deadline=$(($(now_ms) + $1 * 1000)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if (($(now_ms) > deadline)); then
      log "timed out waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- PKI

pki() {
  local p="$DIR/pki"
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sharemgr-test-ca \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  cert() { # cert NAME SUBJECT [SAN]
    local ext="$p/$1.ext"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
    [[ -z ${3:-} ]] || echo "subjectAltName=$3" >>"$ext"
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$p/$1.key" -out "$p/$1.csr" 2>/dev/null
    openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
      -days 2 -extfile "$ext" -out "$p/$1.crt" 2>/dev/null
    rm -f "$p/$1.csr" "$ext"
  }
  cert apiserver /CN=kube-apiserver \
    "IP:$NODE_IP,IP:$SERVICE_FIRST_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=sharemgr-admin"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "IP:$NODE_IP,DNS:$NODE_NAME"
  cert controller-manager /CN=system:kube-controller-manager
  cert scheduler /CN=system:kube-scheduler
  cert proxy /CN=system:kube-proxy
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  chmod 0600 "$p"/*.key
}

kubeconfig() { # kubeconfig NAME CERT
  cat >"$DIR/$1.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: sharemgr
    cluster:
      certificate-authority: $DIR/pki/ca.crt
      server: https://$NODE_IP:$API_PORT
users:
  - name: $2
    user:
      client-certificate: $DIR/pki/$2.crt
      client-key: $DIR/pki/$2.key
contexts:
  - name: sharemgr
    context: {cluster: sharemgr, user: $2}
current-context: sharemgr
YAML
}

# ---------------------------------------------------------------- images

# The sandbox ("pause") image, made here: a static program that waits for a
# signal and reaps, as the pod's first process. No registry is reachable.
pause_image() {
  local b="$DIR/pause-build"
  mkdir -p "$b"
  cat >"$b/pause.c" <<'C'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, quit);
  signal(SIGTERM, quit);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
C
  cc -O2 -static -o "$b/pause" "$b/pause.c"
  local c
  c=$(buildah --storage-driver vfs from scratch)
  buildah --storage-driver vfs copy "$c" "$b/pause" /pause >/dev/null
  buildah --storage-driver vfs config --entrypoint '["/pause"]' "$c"
  buildah --storage-driver vfs commit -q "$c" "$PAUSE_IMAGE" >/dev/null
  buildah --storage-driver vfs rm "$c" >/dev/null
  import_image "$PAUSE_IMAGE"
  podman --storage-driver vfs rmi "$PAUSE_IMAGE" >/dev/null 2>&1 || true
}

# import_image TAG: from podman's vfs store into containerd's k8s.io namespace
# (the only one CRI sees), under the same name.
import_image() {
  local tar="$DIR/image-import.tar"
  rm -f "$tar"
  podman --storage-driver vfs save --format oci-archive -o "$tar" "$1" >/dev/null
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import --base-name "${1%:*}" \
    --index-name "$1" "$tar" >/dev/null
  rm -f "$tar"
}

# ---------------------------------------------------------------- up

write_env() {
  cat >"$DIR/env" <<ENV
export KUBECONFIG=$DIR/admin.kubeconfig
export KUBECACHEDIR=$DIR/kube-cache
export SHAREMGR_K8S_DIR=$DIR
export SHAREMGR_K8S_BIN=$BIN
export SHAREMGR_K8S_NODE=$NODE_NAME
export SHAREMGR_K8S_NODE_IP=$NODE_IP
export SHAREMGR_K8S_NODE_CIDR=$NODE_CIDR
export SHAREMGR_K8S_POD_CIDR=$POD_CIDR
export SHAREMGR_K8S_NODE_POD_IP=$NODE_POD_IP
export SHAREMGR_K8S_SERVICE_CIDR=$SERVICE_CIDR
export SHAREMGR_K8S_CLUSTER_RANGE=$CLUSTER_RANGE
export SHAREMGR_K8S_CONTAINERD=$CONTAINERD_SOCK
export SHAREMGR_K8S_KUBELET_PORT=$KUBELET_PORT
export SHAREMGR_K8S_DROP_CHAIN=$DROP_CHAIN
export PATH=$BIN:\$PATH
ENV
}

load_layout() {
  [[ -f $DIR/net.env ]] || die "no cluster in $DIR (run: $0 up $DIR)"
  # shellcheck disable=SC1091
  source "$DIR/net.env"
}

layout() {
  local net
  net=$(pick_range) || {
    log "no free 10.x.0.0/16 for the test cluster (ip route shows them all taken)"
    false
  }
  cat >"$DIR/net.env" <<NET
CLUSTER_RANGE=$net.0.0/16
NODE_CIDR=$net.1.0/24
NODE_IP=$net.1.1
POD_CIDR=$net.2.0/24
NODE_POD_IP=$net.2.1
SERVICE_CIDR=$net.3.0/24
SERVICE_FIRST_IP=$net.3.1
CONTAINERD_SOCK=$DIR/containerd/containerd.sock
PAUSE_IMAGE=localhost/sharemgr-pause:1
BIN=$BIN
NET
  load_layout
}

# Paths that kubelet, containerd and CNI make whatever their configuration
# says; those that did not exist before `up` go with the cluster.
HARD_CODED_PATHS=(/run/netns /run/containerd/s /run/containerd /var/lib/kubelet /var/lib/cni /var/log/containers)

network_up() {
  local s p
  : >"$DIR/sysctl.saved"
  for s in "${SYSCTLS[@]}"; do
    [[ -e /proc/sys/${s//.//} ]] && echo "$s=$(sysctl -n "$s")" >>"$DIR/sysctl.saved"
  done
  ls /run/netns 2>/dev/null >"$DIR/netns.before" || : >"$DIR/netns.before"
  nft list tables 2>/dev/null | sed 's/^table //' >"$DIR/nft-tables.before" || : >"$DIR/nft-tables.before"
  for p in "${HARD_CODED_PATHS[@]}"; do
    [[ -e $p ]] || echo "$p" >>"$DIR/made-paths"
  done
  # Each thing is written down as it is made: down removes what this
  # cluster made, nothing of another's.
  ip link add "$NODE_BRIDGE" type bridge
  echo "link $NODE_BRIDGE" >>"$DIR/created"
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  ip route add blackhole "$CLUSTER_RANGE"
  echo "route blackhole $CLUSTER_RANGE" >>"$DIR/created"
  # Host-made packets to a ClusterIP need a route before kube-proxy's DNAT
  # (a blackhole would fail the connect): the node's own bridge, where no
  # other host is.
  ip route add "$SERVICE_CIDR" dev "$NODE_BRIDGE"
  echo "route $SERVICE_CIDR dev $NODE_BRIDGE" >>"$DIR/created"
  echo "link $CNI_BRIDGE" >>"$DIR/created" # made by the bridge plugin with the first pod
  # The guard, counted: what enters or leaves the cluster's range through
  # anything but its own bridges (and their pods' veths) or loopback is
  # dropped. In FORWARD, as kube-proxy's rules see it, and in mangle
  # POSTROUTING, which every forwarded and locally made packet crosses
  # whatever kube-proxy accepted before.
  local table
  for table in filter mangle; do
    iptables -t "$table" -N "$DROP_CHAIN"
    echo "chain $table $DROP_CHAIN" >>"$DIR/created"
    iptables -t "$table" -A "$DROP_CHAIN" -o lo -j RETURN
    iptables -t "$table" -A "$DROP_CHAIN" -o "smk8s+" -j RETURN
    iptables -t "$table" -A "$DROP_CHAIN" -o "veth+" -j RETURN
    iptables -t "$table" -A "$DROP_CHAIN" -s "$CLUSTER_RANGE" -j DROP
    iptables -t "$table" -A "$DROP_CHAIN" -d "$CLUSTER_RANGE" -j DROP
  done
  iptables -t filter -I FORWARD 1 -j "$DROP_CHAIN"
  iptables -t mangle -I POSTROUTING 1 -j "$DROP_CHAIN"
  # Kubernetes' bridge traffic goes through iptables (kube-proxy relies on it).
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
}

# Packets the guard dropped so far, in both tables.
dropped_packets() {
  local table n=0 c
  for table in filter mangle; do
    c=$(iptables -t "$table" -L "$DROP_CHAIN" -nvx 2>/dev/null | awk '$3 == "DROP" {s += $1} END {print s + 0}')
    n=$((n + c))
  done
  echo "$n"
}

write_configs() {
  mkdir -p "$DIR/cni/net.d" "$DIR/cni/ipam" "$DIR/containerd" "$DIR/kubelet" "$DIR/pod-logs"
  cat >"$DIR/cni/net.d/10-sharemgr.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "sharemgr-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
JSON
  cat >"$DIR/containerd/config.toml" <<TOML
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$DIR/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # These machines lack CAP_SYS_RESOURCE: no process may lower its
  # oom_score_adj (the sandbox asks for -998), so clamp it to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
  # Every registry points nowhere: an image that was not imported fails at
  # once and is never pulled.
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
    endpoint = ["http://127.0.0.1:9"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."*"]
    endpoint = ["http://127.0.0.1:9"]
TOML
  kubeconfig admin admin
  kubeconfig kubelet kubelet
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig proxy proxy
  cat >"$DIR/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These machines mount cgroup v1 controllers; 1.35+ refuse v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $DIR/pki/kubelet.crt
tlsPrivateKeyFile: $DIR/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
# No DNS server and no host resolver: nothing in a pod can look a name up
# outside the machine.
resolvConf: ""
clusterDomain: cluster.local
failSwapOn: false
podLogsDir: $DIR/pod-logs
# Disks here can be nearly full: evict only when truly out of room.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
staticPodPath: ""
syncFrequency: 10s
fileCheckFrequency: 10s
YAML
  cat >"$DIR/proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $DIR/proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: [$NODE_CIDR]
# Leave the machine's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

apiserver_ready() {
  curl -sf --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" \
    "https://$NODE_IP:$API_PORT/readyz" >/dev/null
}

node_ready() {
  [[ $("$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" --cache-dir "$DIR/kube-cache" get node "$NODE_NAME" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# Any step of up that fails: what each component said last, then everything
# taken down again, and a failure.
up_failed() {
  # A failure inside a command substitution reaches here in its subshell:
  # only the script itself cleans up.
  [[ $BASHPID == "$$" ]] || exit 1
  trap - ERR
  log "up failed at line ${BASH_LINENO[0]} (in ${FUNCNAME[1]:-up}); the components' last words:"
  local f
  for f in "$DIR"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- $(basename "$f")" >&2
    tail -n 15 "$f" >&2
  done
  down || true
  exit 1
}

up() {
  [[ $(id -u) == 0 ]] || die "must run as root (kubelet, containerd, mounts, bridges)"
  local t0
  t0=$(now_ms)
  if [[ -e $DIR ]]; then
    die "$DIR exists: a cluster lives there, or an earlier one was not taken down (run: $0 down $DIR)"
  fi
  # One test cluster per machine: the bridges, the guard and kubelet's fixed
  # paths have one name each.
  local other
  for other in "$NODE_BRIDGE" "$CNI_BRIDGE"; do
    ! ip link show "$other" >/dev/null 2>&1 ||
      die "another test cluster is up ($other exists; its directory: $(cat /run/sharemgr-k8s.owner 2>/dev/null || echo unknown)); take it down first"
  done
  local need=() tool
  for tool in containerd runc ctr iptables buildah podman openssl curl cc losetup; do
    command -v "$tool" >/dev/null || need+=("$tool")
  done
  [[ -x /usr/lib/cni/bridge ]] || need+=(/usr/lib/cni/bridge)
  ((${#need[@]} == 0)) || die "missing ${need[*]} (scripts/setup.sh installs them)"
  BIN=$(bash "$here/build_binaries.sh" | tail -n 1) || die "building the cluster's binaries failed (see above)"
  mkdir -p "$DIR/log" "$DIR/pids"
  touch "$DIR/$MARKER"
  echo "$DIR" >/run/sharemgr-k8s.owner
  trap up_failed ERR
  layout
  network_up
  pki
  write_configs

  start etcd "$BIN/etcd" --name sharemgr --data-dir "$DIR/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "sharemgr=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls "" --log-level warn
  started etcd "$BIN/etcd"
  # containerd 1.6 tries a registry's own host after its mirrors: a proxy
  # that is nowhere keeps even that on this machine.
  start containerd env HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
    containerd --config "$DIR/containerd/config.toml"
  started containerd "$(command -v containerd)"
  # What share-controller's replicas write, and which replica (its user
  # agent) sent it: the deploy test reads it to prove a deposed leader wrote
  # nothing once another led.
  cat >"$DIR/audit-policy.yaml" <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:default:share-controller"]
    verbs: [create, update, patch, delete]
  - level: None
YAML
  start kube-apiserver "$BIN/kube-apiserver" \
    --audit-policy-file="$DIR/audit-policy.yaml" --audit-log-path="$DIR/audit.log" \
    --audit-log-maxsize=100 \
    --advertise-address="$NODE_IP" --bind-address="$NODE_IP" --secure-port="$API_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --service-cluster-ip-range="$SERVICE_CIDR" --service-node-port-range=30000-30099 \
    --client-ca-file="$DIR/pki/ca.crt" \
    --tls-cert-file="$DIR/pki/apiserver.crt" --tls-private-key-file="$DIR/pki/apiserver.key" \
    --kubelet-client-certificate="$DIR/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$DIR/pki/apiserver-kubelet-client.key" \
    --service-account-key-file="$DIR/pki/sa.pub" \
    --service-account-signing-key-file="$DIR/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true --profiling=false --v=1
  started kube-apiserver "$BIN/kube-apiserver"
  wait_for 120 "kube-apiserver /readyz" apiserver_ready

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file="$DIR/pki/sa.key" --root-ca-file="$DIR/pki/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$DIR/pki/ca.crt" --cluster-signing-key-file="$DIR/pki/ca.key" \
    --profiling=false --v=1
  started kube-controller-manager "$BIN/kube-controller-manager"
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --profiling=false --v=1
  started kube-scheduler "$BIN/kube-scheduler"
  start kube-proxy "$BIN/kube-proxy" --config="$DIR/proxy.yaml" --v=1
  started kube-proxy "$BIN/kube-proxy"

  wait_for 30 "containerd" ctr --address "$CONTAINERD_SOCK" version
  pause_image
  start kubelet "$BIN/kubelet" --config="$DIR/kubelet/config.yaml" \
    --kubeconfig="$DIR/kubelet.kubeconfig" --root-dir="$DIR/kubelet" \
    --cert-dir="$DIR/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
  started kubelet "$BIN/kubelet"
  wait_for 120 "node $NODE_NAME Ready" node_ready
  # Pods need their namespace's default ServiceAccount and root CA.
  wait_for 120 "the default ServiceAccount" "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" --cache-dir "$DIR/kube-cache" \
    -n default get serviceaccount default
  trap - ERR
  write_env
  log "up in $((($(now_ms) - t0) / 1000)) s: node $NODE_NAME at $NODE_IP, pods $POD_CIDR, services $SERVICE_CIDR"
  cat "$DIR/env"
}

# ---------------------------------------------------------------- down

# Processes whose command line names this cluster's state directory (containerd's
# shims are re-parented to init, so no pid file knows them).
pids_naming_dir() {
  local p pid ancestors=" " a=$BASHPID
  # Never this script or whatever runs it (a test's command line may name the directory).
  while [[ -n $a && $a -gt 1 ]]; do
    ancestors+="$a "
    a=$(awk '/^PPid:/ {print $2}' "/proc/$a/status" 2>/dev/null)
  done
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $ancestors == *" $pid "* ]] && continue
    # Its command line names the directory (the shims), or it is a kubectl
    # against this cluster (a test's watch left behind).
    if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$DIR/" ||
      { [[ -n ${BIN:-} && $(readlink "$p/exe" 2>/dev/null) == "$BIN/kubectl" ]] &&
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF -- "KUBECONFIG=$DIR/admin.kubeconfig"; }; then
      echo "$pid"
    fi
  done
  return 0
}

kill_cgroup_tree() { # every process in the kubepods cgroups, in every hierarchy
  local procs
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    procs=$(find /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)
    [[ -n $procs ]] || return 0
    # shellcheck disable=SC2086
    kill -KILL $procs 2>/dev/null || true
    sleep 0.2
  done
  log "processes still in kubepods cgroups: $procs"
}

remove_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h/kubepods ]] || continue
    find "$h/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ ! -d $h/kubepods ]] || log "could not remove ${h}kubepods"
  done
}

unmount_under() { # everything mounted below a path, deepest first
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done < <(awk -v d="$1" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

# Deletes every rule in the built-in chains that jumps to a KUBE-* chain
# (by its number, highest first: nothing of a rule's text is run), then every
# KUBE-* chain: what kube-proxy and kubelet leave in iptables.
remove_kube_chains() {
  local ipt=$1 table chain num
  for table in filter nat mangle; do
    "$ipt" -t "$table" -S >/dev/null 2>&1 || continue
    for chain in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do
      "$ipt" -t "$table" -S "$chain" >/dev/null 2>&1 || continue
      for num in $("$ipt" -t "$table" -L "$chain" -n --line-numbers | awk 'NR > 2 && $2 ~ /^KUBE-/ {print $1}' | sort -rn); do
        "$ipt" -t "$table" -D "$chain" "$num" 2>/dev/null || true
      done
    done
    for chain in $("$ipt" -t "$table" -S | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $("$ipt" -t "$table" -S | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

# The nftables tables that iptables-nft made for the cluster and that hold no
# rule any more (kube-proxy's ip6tables and mangle calls create them).
remove_empty_new_nft_tables() {
  command -v nft >/dev/null || return 0
  local t
  while read -r t; do
    [[ -n $t ]] || continue
    grep -qxF "$t" "$DIR/nft-tables.before" 2>/dev/null && continue
    # shellcheck disable=SC2086
    nft list table $t 2>/dev/null | grep -vE '^\s*(table|chain|type|\}|$)' | grep -q . && continue
    # shellcheck disable=SC2086
    nft delete table $t 2>/dev/null || true
  done < <(nft list tables 2>/dev/null | sed 's/^table //')
}

down() {
  trap - ERR
  set +e
  [[ -e $DIR ]] || return 0
  [[ -f $DIR/$MARKER ]] || die "$DIR is not a test cluster's directory (no $MARKER): left alone"
  # shellcheck disable=SC1091
  [[ -f $DIR/net.env ]] && source "$DIR/net.env"
  local name
  stop_pid_name kubelet 10
  kill_cgroup_tree
  # The shims, and whatever else runs from this directory or against it.
  # shellcheck disable=SC2046
  kill -KILL $(pids_naming_dir) 2>/dev/null
  for name in kube-proxy kube-scheduler kube-controller-manager containerd kube-apiserver etcd; do
    stop_pid_name "$name" 10
  done
  # shellcheck disable=SC2046
  kill -KILL $(pids_naming_dir) 2>/dev/null
  if [[ -n ${BIN:-} && -x $BIN/kube-proxy && -f $DIR/proxy.yaml ]]; then
    "$BIN/kube-proxy" --cleanup --config="$DIR/proxy.yaml" >/dev/null 2>&1
  fi
  # kubelet's block volumes are held by loop devices over files below its root.
  local loop
  for loop in $(losetup -a 2>/dev/null | grep -F "$DIR/" | cut -d: -f1); do
    losetup -d "$loop" 2>/dev/null || log "could not detach $loop"
  done
  unmount_under "$DIR/"
  # CNI's network namespaces (made by containerd under /run/netns).
  local ns
  for ns in /run/netns/cni-*; do
    [[ -e $ns ]] || continue
    ns=${ns#/run/netns/}
    if ! grep -qx "$ns" "$DIR/netns.before" 2>/dev/null; then
      umount "/run/netns/$ns" 2>/dev/null || umount -l "/run/netns/$ns" 2>/dev/null
      rm -f "/run/netns/$ns"
    fi
  done
  # Loop devices made for the tests' block volumes.
  if [[ -f $DIR/loops ]]; then
    while read -r loop; do losetup -d "$loop" 2>/dev/null; done <"$DIR/loops"
  fi
  remove_cgroups
  remove_kube_chains iptables
  remove_kube_chains ip6tables
  local dropped=0
  iptables -t filter -S "$DROP_CHAIN" >/dev/null 2>&1 && dropped=$(dropped_packets)
  # What up made, in reverse.
  local kind a b c
  if [[ -f $DIR/created ]]; then
    while read -r kind a b c; do
      case $kind in
        link) ip link del "$a" 2>/dev/null ;;
        route) ip route del "$a" ${b:+"$b"} ${c:+"$c"} 2>/dev/null ;;
        chain)
          iptables -t "$a" -D FORWARD -j "$b" 2>/dev/null
          iptables -t "$a" -D POSTROUTING -j "$b" 2>/dev/null
          iptables -t "$a" -F "$b" 2>/dev/null
          iptables -t "$a" -X "$b" 2>/dev/null
          ;;
      esac
    done < <(tac "$DIR/created")
  fi
  remove_empty_new_nft_tables
  # This cluster's shims' sockets, also where another containerd owns the folder.
  find /run/containerd/s -maxdepth 1 -type s -newer "$DIR/$MARKER" -delete 2>/dev/null
  if [[ -f $DIR/made-paths ]]; then
    local made
    while read -r made; do
      case $made in
        /run/containerd/s | /run/containerd | /run/netns)
          # iproute2 and CNI bind-mount /run/netns onto itself when they make it.
          ! mountpoint -q "$made" || umount "$made" 2>/dev/null
          [[ ! -e $made ]] || rmdir "$made" 2>/dev/null || log "left $made: not empty"
          ;;
        *) rm -rf --one-file-system "$made" ;;
      esac
    done <"$DIR/made-paths"
  fi
  if [[ -f $DIR/sysctl.saved ]]; then
    local kv
    while read -r kv; do sysctl -qw "$kv" 2>/dev/null || log "could not restore $kv"; done <"$DIR/sysctl.saved"
  fi
  local left
  left=$(leftovers)
  [[ $(cat /run/sharemgr-k8s.owner 2>/dev/null) != "$DIR" ]] || rm -f /run/sharemgr-k8s.owner
  # The marker last: a directory half removed is still known for a cluster's.
  find "$DIR" -mindepth 1 -maxdepth 1 ! -name "$MARKER" -exec rm -rf --one-file-system {} +
  rm -f "$DIR/$MARKER"
  rmdir "$DIR" 2>/dev/null || left+="${left:+$'\n'}directory $DIR (not empty)"
  if ((dropped > 0)); then
    log "FAIL: $dropped packets tried to enter or leave the cluster's range another way than its own bridges, and were dropped"
  fi
  if [[ -n $left ]]; then
    log "FAIL: left behind:"
    printf '  %s\n' "${left//$'\n'/$'\n'  }" >&2
  fi
  [[ $dropped == 0 && -z $left ]] || return 1
  log "down: nothing of the cluster left"
}

# Whatever of this cluster is still here, one line each (nothing: all gone).
leftovers() {
  local p
  for p in $(pids_naming_dir); do echo "process $p: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-120)"; done
  awk -v d="$DIR/" 'index($5, d) == 1 {print "mount " $5}' /proc/self/mountinfo
  losetup -a 2>/dev/null | grep -F "$DIR/" | sed 's/^/loop device /'
  find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -name kubepods -type d -printf 'cgroup %p\n' 2>/dev/null
  local ns
  for ns in /run/netns/cni-*; do
    [[ -e $ns ]] && ! grep -qx "${ns#/run/netns/}" "$DIR/netns.before" 2>/dev/null && echo "network namespace $ns"
  done
  local kind a b c
  if [[ -f $DIR/created ]]; then
    while read -r kind a b c; do
      case $kind in
        link) ip link show "$a" >/dev/null 2>&1 && echo "link $a" ;;
        route)
          local prefix=$a
          [[ $a == blackhole ]] && prefix=$b
          ip route show table all exact "$prefix" 2>/dev/null | grep -q . && echo "route $a $b $c"
          ;;
        chain) iptables -t "$a" -S "$b" >/dev/null 2>&1 && echo "iptables chain $a $b" ;;
      esac
    done <"$DIR/created"
  fi
  local ipt
  for ipt in iptables ip6tables; do
    "$ipt"-save 2>/dev/null | grep -q '^:KUBE-' && echo "$ipt KUBE-* chains"
  done
  if [[ -f $DIR/made-paths ]]; then
    local made
    while read -r made; do [[ -e $made ]] && echo "path $made"; done <"$DIR/made-paths"
  fi
  return 0
}

# ---------------------------------------------------------------- commands

case $cmd in
  up)
    DIR=$(state_dir_arg "${1:-}")
    BIN=
    up
    ;;
  down)
    DIR=$(state_dir_arg "${1:-}")
    BIN=
    down
    ;;
  env)
    DIR=$(state_dir_arg "${1:-}")
    [[ -f $DIR/env ]] || die "no cluster is up in $DIR"
    cat "$DIR/env"
    ;;
  import-image)
    [[ -n ${1:-} ]] || die "usage: $0 import-image TAG [DIR]"
    DIR=$(state_dir_arg "${2:-}")
    load_layout
    import_image "$1"
    ;;
  block-device)
    [[ -n ${1:-} && -n ${2:-} ]] || die "usage: $0 block-device NAME SIZE [DIR]"
    DIR=$(state_dir_arg "${3:-}")
    load_layout
    [[ $1 =~ ^[a-z0-9-]+$ ]] || die "block-device: name '$1' must be lowercase letters, digits and '-'"
    mkdir -p "$DIR/images"
    truncate -s "$2" "$DIR/images/$1.img"
    loop=$(losetup -f --show "$DIR/images/$1.img")
    echo "$loop" >>"$DIR/loops"
    echo "$loop"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    [[ $cmd == -h || $cmd == --help ]] || exit 2
    ;;
esac
