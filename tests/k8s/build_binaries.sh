#!/usr/bin/env bash
# Builds the test cluster's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kube-proxy, kubelet, kubectl) from the Go module proxy, once per
# version: they land in a cache outside the repository keyed on versions.env, so a
# second run builds nothing. Prints the cache's bin directory on its last line.
#
# No Kubernetes server binary is packaged in Debian; k8s.io/kubernetes is consumed
# the way downstream projects do: a module of our own requires it and pins each
# staging module it lists at v0.0.0 to the matching published release.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/k8s/versions.env
source "$here/versions.env"

cache_root=${SHAREMGR_K8S_CACHE:-/var/cache/share-manager/k8s}
key="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
bin="$cache_root/$key/bin"
wanted=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)

have_all() {
  local b
  for b in "${wanted[@]}"; do [ -x "$bin/$b" ] || return 1; done
}
if have_all; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  cat >&2 <<TXT
build_binaries: no 'go' on PATH. The test cluster's Kubernetes and etcd binaries are
built from the Go module proxy (Debian packages no Kubernetes server). Install Go
1.26 or newer (Debian: apt-get install golang-1.2x-go, or the polyglot machine's Go),
or put prebuilt binaries of ${K8S_VERSION} and etcd ${ETCD_VERSION} in $bin.
TXT
  exit 1
fi

work="$cache_root/$key/src"
mkdir -p "$work" "$bin"
cd "$work"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local}

build_kubernetes() {
  rm -f go.mod go.sum
  go mod init sharemgr.test/k8s-binaries >/dev/null 2>&1
  go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # Every staging module the release requires at v0.0.0, pinned to its published twin.
  local m
  for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod"; \
             awk '/^require/ {on=1; next} on && /^\)/ {on=0} on && $1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
    go mod edit -replace="$m=$m@${K8S_STAGING_VERSION}"
  done
  printf 'package tools\n\nimport (\n' > tools.go
  local cmd
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd" >> tools.go
  done
  printf ')\n' >> tools.go
  sed -i '1i //go:build tools' tools.go
  go mod tidy -e >/dev/null 2>&1 || true
  local git_version=${K8S_VERSION} major minor
  major=${K8S_VERSION#v}; major=${major%%.*}
  minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  local ldflags="-s -w"
  local pkg=k8s.io/component-base/version
  ldflags+=" -X $pkg.gitVersion=${git_version} -X $pkg.gitMajor=${major} -X $pkg.gitMinor=${minor}"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${git_version}"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
    [ -x "$bin/$cmd" ] && continue
    echo "build_binaries: building $cmd ${K8S_VERSION}" >&2
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$bin/$cmd.tmp" "$bin/$cmd"
  done
}

build_etcd() {
  [ -x "$bin/etcd" ] && return 0
  local d="$work/etcd"
  mkdir -p "$d"
  (
    cd "$d"
    rm -f go.mod go.sum
    go mod init sharemgr.test/etcd-binary >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy -e >/dev/null 2>&1 || true
    echo "build_binaries: building etcd ${ETCD_VERSION}" >&2
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$bin/etcd.tmp" "$bin/etcd"
  )
}

build_etcd
build_kubernetes
have_all
echo "$bin"
