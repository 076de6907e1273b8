#!/usr/bin/env bash
# The share-controller image: builds it (with the share-manager image, from
# one builder) from a clean checkout of HEAD with container/build.sh, reports
# its size, checks what it holds (no compiler, no apt lists, a stripped
# binary whose every library resolves inside the image) and how it is
# configured (user 65532, the binary as entrypoint, --help by default, the
# metrics port), then runs it as a pod would, as its own user on a read-only
# root: --help, a pod template that is not there (exit 2, naming it), and the
# shipped template with an API server that does not answer (exit 1, naming
# it). Leaves no container or image behind.
#
# Usage: tests/container/controller_image_test.sh   (root; ctest label "container")
#   SHARE_CONTROLLER_IMAGE=TAG tests/container/controller_image_test.sh  tests
#   an image already built (kept afterwards) instead of building one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
STORAGE=(--storage-driver vfs)
source "$repo/tests/container/checks.sh"
source "$repo/tests/container/image_share.sh" # free_port

work=$(mktemp -d /tmp/share-controller-image-test.XXXXXX)
tag=${SHARE_CONTROLLER_IMAGE:-localhost/share-controller:test-$$}
# build_head.sh builds the controller image with the share-manager one.
manager_tag=localhost/share-manager:controller-test-$$
binary=/usr/local/bin/share-controller
containers=()
root=

cleanup() {
  ((${#containers[@]} == 0)) || podman "${STORAGE[@]}" rm -f "${containers[@]}" >/dev/null 2>&1 || true
  [[ -z $root ]] || podman "${STORAGE[@]}" image unmount "$tag" >/dev/null 2>&1 || true
  [[ -n ${SHARE_CONTROLLER_IMAGE:-} ]] ||
    podman "${STORAGE[@]}" rmi "$tag" "$manager_tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM # so that cleanup runs when interrupted too

# Every run as a pod runs it: the image's user and entrypoint, a read-only
# root with no writable tmpfs (readOnlyRootFilesystem), no network unless
# asked. runc when installed: crun refuses a hybrid cgroup hierarchy (this
# kind of machine). Limits lowered, never raised: podman's defaults (1048576
# open files) need CAP_SYS_RESOURCE, which a container host may lack.
run_flags=(--rm --read-only --read-only-tmpfs=false
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
! command -v runc >/dev/null || run_flags+=(--runtime runc)
# run NAME [PODMAN_RUN_FLAG...] -- [ARG...]: the image once; stdout in
# $work/NAME.out, stderr in $work/NAME.err, the exit code in $code (podman's
# own are 125-127, timeout's 124: a hang is a failure, not a wait).
run() {
  local name=$1 flags=()
  shift
  while [[ $1 != -- ]]; do
    flags+=("$1")
    shift
  done
  shift
  containers+=("share-controller-image-test-$$-$name")
  code=0
  timeout 120 podman "${STORAGE[@]}" run "${run_flags[@]}" --name "${containers[-1]}" \
    "${flags[@]}" "$tag" "$@" >"$work/$name.out" 2>"$work/$name.err" || code=$?
  ((code < 124)) || tail -n 20 "$work/$name.err"
}
has() { grep -qF -- "$2" "$work/$1"; } # has FILE TEXT

image_under_test "${SHARE_CONTROLLER_IMAGE:-}" "$tag" "$manager_tag" "$tag"

echo "== how it is configured"
config() { podman "${STORAGE[@]}" image inspect "$tag" --format "{{json .Config.$1}}"; }
user=$(config User)
check "the configured user is 65532:65532, not root: $user" test "$user" = '"65532:65532"'
entrypoint=$(config Entrypoint)
check "the entrypoint is the binary: $entrypoint" test "$entrypoint" = "[\"$binary\"]"
cmd=$(config Cmd)
check "the default arguments are --help: $cmd" test "$cmd" = '["--help"]'
ports=$(config ExposedPorts)
check "it exposes the metrics port 9700/tcp: $ports" test "$ports" = '{"9700/tcp":{}}'

echo "== what it holds"
# The image's own files, read in place (the mount is read-only use only).
root=$(podman "${STORAGE[@]}" image mount "$tag")
found=$(for t in cc gcc g++ c++ cpp clang clang++ ld as make; do
  for d in usr/bin bin usr/local/bin; do # /bin is usr/bin's link in a merged /usr
    [[ -L $root/$d || ! -e $root/$d/$t ]] || echo "/$d/$t"
  done
done
{ dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${db:Status-Status} ${Package}\n' \
  gcc g++ cpp binutils libc6-dev 2>/dev/null || true; } | sed -n 's/^installed //p')
check "no compiler, linker or C headers in the image${found:+ (found: $found)}" test -z "$found"
lists=$(cd "$root" && find var/lib/apt/lists var/cache/apt -type f 2>/dev/null) || true
check "no apt lists or caches${lists:+ (found: $lists)}" test -z "$lists"
stripped() { ! readelf -S "$root$binary" | grep -q '\.symtab'; }
check "the binary is stripped (no .symtab)" stripped
check "/ is searchable by others (the user 65532 reaches /usr)" \
  test "$(($(stat -c '0%a' "$root") & 01))" = 1
# ldd is libc-bin's script; without it, the dynamic loader lists the same.
if [[ -x $root/usr/bin/ldd ]]; then lister=(--entrypoint ldd -- "$binary"); else
  lister=(--entrypoint /lib64/ld-linux-x86-64.so.2 -- --list "$binary")
fi
run libs --network none "${lister[@]}"
missing=$(grep -F 'not found' "$work/libs.out" || true)
resolved() { [[ $code == 0 && -z $missing ]] && has libs.out "libc.so.6 => "; }
check "every library the binary links resolves in the image ($(grep -c '=>' "$work/libs.out") listed, exit $code)${missing:+: $missing}" \
  resolved
run id --network none --entrypoint id -- -u
check "it runs as uid 65532 (got $(cat "$work/id.out"), exit $code)" test "$(cat "$work/id.out")" = 65532

echo "== run as a pod runs it (uid 65532, read-only root)"
run help --network none --
check "--help (the default arguments) exits 0 (got $code)" test "$code" = 0
check "--help describes --kubernetes" has help.out --kubernetes
run no-template --network none -- --kubernetes --pod-template /nonexistent
check "--kubernetes --pod-template /nonexistent exits 2, bad flags (got $code)" test "$code" = 2
check "its stderr names /nonexistent: $(head -c 300 "$work/no-template.err")" has no-template.err /nonexistent

# The shipped template, and a kubeconfig (a throwaway CA, as a cluster's)
# naming a port on the host's loopback that nobody listens on.
port=$(free_port)
server=https://127.0.0.1:$port
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=controller-image-test-ca -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
cat >"$work/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: nobody-listens
    cluster:
      server: $server
      certificate-authority-data: $(base64 -w0 "$work/ca.crt")
contexts:
  - name: nobody-listens
    context:
      cluster: nobody-listens
      namespace: default
current-context: nobody-listens
EOF
chmod 0644 "$work/kubeconfig"
conf=/etc/share-controller
run no-apiserver --network host \
  -v "$work/kubeconfig:$conf/kubeconfig:ro" -v "$repo/container/k8s/share-manager-pod.yaml:$conf/pod.yaml:ro" -- \
  --kubernetes --kubeconfig "$conf/kubeconfig" --pod-template "$conf/pod.yaml"
check "with the shipped template and no API server at $server it exits 1 (got $code)" test "$code" = 1
names_server() { tail -n 1 "$work/no-apiserver.err" | grep -qF "at $server:"; }
check "its stderr names $server: $(tail -n 1 "$work/no-apiserver.err" | head -c 300)" names_server

echo "$failures failed"
((failures == 0))
