#!/usr/bin/env bash
# Installs what share-manager needs to build, run and test on Debian 12.
# Idempotent: installs only what is missing. Run as root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  # a compiler cache: rebuilds, and the mutation check's scratch builds, reuse objects
  ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # libext2fs-dev, xfslibs-dev: the filesystems' geometry for the trim's ranges
  libext2fs-dev xfslibs-dev
  libmount-dev libblkid-dev e2fsprogs xfsprogs util-linux fdisk libcli11-dev libspdlog-dev libfmt-dev doctest-dev
  nfs-ganesha nfs-ganesha-vfs
  libnfs-dev libnfs-utils
  # --metrics-listen (prometheus-cpp: core + pull); the tests parse the
  # exposition with the Python client's parser
  prometheus-cpp-dev python3-prometheus-client
  # ...scraped by curl as Prometheus scrapes: HTTP/1.1, keep-alive, gzip accepted
  curl
  # s6 and supervisor: peers in the side-by-side benchmark (bench/)
  s6 supervisor
  procps iproute2
  # the style check (tests/style_check.sh) and clang's thread-safety analysis
  clang-format shellcheck clang
  # libFuzzer (clang's runtime library; Debian ships it apart): tests/fuzz
  libclang-rt-14-dev
  # the container image and its tests (tests/container): no Docker daemon needed
  buildah podman debootstrap
  # the single-node Kubernetes the k8s tests run on (tests/k8s/cluster.sh):
  # containerd + runc as the node's runtime, the bridge CNI plugin, iptables
  # for kube-proxy; Kubernetes itself is built from the Go module proxy
  containerd runc containernetworking-plugins iptables
  # share-controller's etcd store: its tests run a real etcd cluster (etcdctl to look at it)
  etcd-server etcd-client
  # the Kubernetes API client (kube/): Debian packages no Kubernetes client for
  # C++, so it is our own over libcurl (HTTPS with client certificates from
  # memory, streamed watches) and nlohmann-json, both packaged and well kept;
  # yaml-cpp reads kubeconfig files
  libcurl4-openssl-dev nlohmann-json3-dev libyaml-cpp-dev
  # --log-format json is checked by a parser not ours: Python's json module (tests/support/json_lines)
  python3
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Installing nfs-ganesha or supervisor must not start their services here.
  apt-get install -y -qq "${missing[@]}"
else
  echo "setup: all packages present"
fi

# The manifest check runs a schema validator from npm; any Node.js with npm
# will do, Debian's when the machine has none.
if ! command -v npm >/dev/null; then
  echo "setup: installing nodejs npm"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
fi
