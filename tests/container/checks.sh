# shellcheck shell=bash
# What the container tests share (sourced): checks that count failures (each
# prints ok or FAIL; the test's exit code is whether $failures stayed 0), and
# the image under test made ready.
failures=0
pass() { echo "ok   $*"; }
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}
check() { # check DESCRIPTION COMMAND...: runs the command, records the outcome.
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}

# image_under_test GIVEN TAG BUILD_HEAD_ARG...: makes TAG ready to test: the
# image given (GIVEN not empty), or built here from a clean checkout of HEAD
# by `container/build_head.sh BUILD_HEAD_ARG...` (the test ends when that
# fails); then prints its size. Uses the caller's $repo and STORAGE.
image_under_test() {
  local given=$1 tag=$2 start unpacked compressed
  shift 2
  # shellcheck disable=SC2154 # the caller's
  local head_build=$repo/container/build_head.sh
  if [[ -n $given ]]; then
    echo "== testing the existing image $tag"
  else
    start=$(date +%s)
    bash "$head_build" "$@" || {
      fail "image builds with container/build.sh"
      exit 1
    }
    pass "image builds with container/build.sh in $(($(date +%s) - start)) s"
  fi
  unpacked=$(podman "${STORAGE[@]}" image inspect "$tag" --format '{{.Size}}')
  compressed=$(podman "${STORAGE[@]}" save --format docker-archive "$tag" 2>/dev/null | gzip -6 | wc -c)
  echo "image size: $((unpacked / 1000000)) MB unpacked, $((compressed / 1000000)) MB compressed" \
    "($unpacked / $compressed bytes; compressed = gzip -6 of 'podman save')"
}
