#!/usr/bin/env bash
# Mutants that must die: applies each source edit of tests/mutants/mutants.txt,
# one at a time, to a scratch copy of the source (never the working tree),
# rebuilds only the mutant's targets, runs only its tests, and reports
# KILLED (a test failed or timed out) or SURVIVED (every test passed: a test
# is missing). Exits non-zero if a mutant survives, a pattern does not occur
# exactly once, a mutant does not compile, or its tests cannot run.
#
# Usage: tests/mutants/run.sh [--no-baseline] [--timeout S] [--list] [ID...]
#   ID...          run only these mutants (every entry is still validated)
#   --list         print the ids and what each one breaks, run nothing
#   --no-baseline  skip running the selected tests on the unmutated source
#                  first (scripts/test.sh has just run them all)
#   --timeout S    per-test time limit, unless an entry sets its own (default 30)
# Env: JOBS (default 2), MUTANTS_FILE (default tests/mutants/mutants.txt).
#
# The scratch build is configured once and reused: only the mutated file (and,
# after it is restored, its original) recompiles. With ccache, objects come
# from the cache (CCACHE_BASEDIR makes the scratch copy's paths match those of
# a build made by scripts/build.sh). Tests run in their own PID and mount
# namespaces with a private /tmp: when a run ends or times out, every process
# it started dies with it and its mounts go; loop devices over images in that
# /tmp are detached. The scratch dir is removed at the end, pass or fail.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
list_file=${MUTANTS_FILE:-$root/tests/mutants/mutants.txt}
jobs=${JOBS:-2}
default_timeout=30
baseline=1
only_list=0
wanted=()
while (($#)); do
  case $1 in
    --no-baseline) baseline=0 ;;
    --timeout)
      default_timeout=${2:?--timeout needs seconds}
      shift
      ;;
    --list) only_list=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
      exit 0
      ;;
    -*)
      echo "mutants: unknown option $1" >&2
      exit 2
      ;;
    *) wanted+=("$1") ;;
  esac
  shift
done

die() {
  echo "mutants: $*" >&2
  exit 2
}

# --- the list: [id] headers, then `key = value` lines; `find+`/`replace+`
# continue a multi-line pattern. One space after `=` is the separator; the
# rest of the line, leading spaces included, is the value.
ids=() files=() finds=() replaces=() builds=() suites=() tests=() timeouts=() whys=()
declare -A has=()
n=-1
lineno=0
while IFS= read -r line || [[ -n $line ]]; do
  lineno=$((lineno + 1))
  [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
  if [[ $line =~ ^\[([a-z0-9][a-z0-9-]*)\]$ ]]; then
    n=$((n + 1))
    ids[n]=${BASH_REMATCH[1]}
    files[n]='' finds[n]='' replaces[n]='' builds[n]='' suites[n]='' tests[n]='' timeouts[n]=''
    whys[n]=''
    continue
  fi
  ((n >= 0)) || die "$list_file:$lineno: a key before the first [id]"
  [[ $line =~ ^([a-z]+)(\+?)[[:space:]]*=( (.*))?$ ]] || die "$list_file:$lineno: cannot parse: $line"
  key=${BASH_REMATCH[1]} more=${BASH_REMATCH[2]} value=${BASH_REMATCH[4]}
  case $key$more in
    find) finds[n]=$value ;;
    find+) finds[n]+=$'\n'$value ;;
    replace) replaces[n]=$value ;;
    replace+) replaces[n]+=$'\n'$value ;;
    file) files[n]=$value ;;
    build) builds[n]=$value ;;
    suite) suites[n]=$value ;;
    tests) tests[n]=$value ;;
    timeout) timeouts[n]=$value ;;
    why) whys[n]=$value ;;
    *) die "$list_file:$lineno: unknown key '$key$more'" ;;
  esac
  has[$n.$key]=1
done <"$list_file"
((n >= 0)) || die "$list_file has no mutants"

# Every entry is checked on every run, so that the list cannot rot silently.
declare -A seen_ids=()
for i in $(seq 0 "$n"); do
  id=${ids[i]}
  [[ -z ${seen_ids[$id]:-} ]] || die "[$id]: the id is used twice"
  seen_ids[$id]=1
  for key in file find replace build tests why; do
    [[ -n ${has[$i.$key]:-} ]] || die "[$id]: no '$key'"
  done
  [[ -n ${finds[i]} && -n ${builds[i]} && -n ${tests[i]} ]] || die "[$id]: empty find, build or tests"
  [[ ${finds[i]} != "${replaces[i]}" ]] || die "[$id]: the replacement changes nothing"
  [[ -z ${timeouts[i]} || ${timeouts[i]} =~ ^[0-9]+$ ]] || die "[$id]: timeout must be seconds"
  [[ -f $root/${files[i]} ]] || die "[$id]: no such file ${files[i]}"
  content=$(<"$root/${files[i]}")
  rest=${content#*"${finds[i]}"}
  [[ $rest != "$content" ]] || die "[$id]: pattern not found in ${files[i]} (the code moved on: update the entry):
${finds[i]}"
  [[ $rest != *"${finds[i]}"* ]] || die "[$id]: pattern occurs more than once in ${files[i]} (make it unique):
${finds[i]}"
done

selected=()
if ((${#wanted[@]})); then
  for id in "${wanted[@]}"; do
    found=-1
    for i in $(seq 0 "$n"); do [[ ${ids[i]} == "$id" ]] && found=$i; done
    ((found >= 0)) || die "no mutant with id '$id' (see --list)"
    selected+=("$found")
  done
else
  mapfile -t selected < <(seq 0 "$n")
fi

if ((only_list)); then
  for i in "${selected[@]}"; do printf '%-32s %s\n' "${ids[i]}" "${whys[i]}"; done
  exit 0
fi

command -v unshare >/dev/null || die "needs unshare (util-linux) to contain the tests"
unshare --pid --fork --mount-proc true 2>/dev/null ||
  die "cannot create PID and mount namespaces (run as root)"

# --- the scratch copy and its build
# Not under /tmp: the tests get a private /tmp of their own, and must still
# reach the build.
scratch=$(mktemp -d "${MUTANTS_SCRATCH_PARENT:-/var/tmp}/sharemgr-mutants.XXXXXX")
src=$scratch/src
build=$src/build # inside the copy, as build/ is in the tree: same relative paths for ccache
job=
cleanup() {
  local status=$?
  # The job runs in its own process group: a build's compilers, or the
  # sandbox (whose namespace dies with it), all go at once.
  if [[ -n $job ]]; then kill -KILL -- "-$job" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  detach_loops
  rm -rf "$scratch"
  exit "$status"
}
# Runs a command as the job, in its own process group, output to $1. A
# background job and `wait` let a signal's trap run at once, not after it.
run_job() {
  local log=$1 rc=0
  shift
  setsid "$@" >"$log" 2>&1 &
  job=$!
  wait "$job" || rc=$?
  job=
  return "$rc"
}
# Loop devices a killed test left attached to an image in the private /tmp.
detach_loops() {
  local image dev
  [[ -d $scratch/tmp ]] || return 0
  while IFS= read -r -d '' image; do
    for dev in $(losetup -n -O NAME -j "$image" 2>/dev/null); do
      losetup -d "$dev" 2>/dev/null || true
    done
  done < <(find "$scratch/tmp" -xdev -type f -size +1M -print0 2>/dev/null)
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$src" "$scratch/pristine"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked and new files as they are now, uncommitted edits included.
  (
    cd "$root"
    git ls-files -z --cached --others --exclude-standard --deduplicate |
      while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
      xargs -0 cp -a --parents -t "$src"
  )
else
  tar -C "$root" --exclude='./build*' -cf - . | tar -C "$src" -xf -
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$src;CCACHE_NOHASHDIR=true;ccache")
fi
start=$SECONDS
echo "== mutants: configuring the scratch build in $build"
run_job "$scratch/configure.log" cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHAREMGR_WERROR=ON "${launcher[@]}" || {
  cat "$scratch/configure.log"
  exit 2
}

# What the selected mutants rebuild, and the test binaries their tests are
# in, built once unmutated.
declare -A target_set=()
for i in "${selected[@]}"; do
  for t in ${builds[i]} ${suites[i]}; do target_set[$t]=1; done
done
echo "== mutants: building ${!target_set[*]} (unmutated)"
run_job "$scratch/build.log" cmake --build "$build" -j "$jobs" --target "${!target_set[@]}" || {
  tail -40 "$scratch/build.log"
  die "the unmutated source does not build"
}
echo "== mutants: scratch build ready in $((SECONDS - start)) s"

# Runs ctest on the tests matching $1 with per-test timeout $2, contained:
# PID namespace (everything dies with it), private mounts, private /tmp.
run_tests() {
  local regex=$1 limit=$2 log=$3 count
  count=$(ctest --test-dir "$build" -N -R "$regex" | sed -n 's/^Total Tests: //p')
  if [[ -z $count || $count == 0 ]]; then
    echo "no test matches '$regex'" >"$log"
    return 3
  fi
  rm -rf "$scratch/tmp"
  mkdir -m 1777 "$scratch/tmp"
  # The namespace's init is the bash below: when it ends (ctest done, or
  # killed with unshare) the kernel kills whatever the tests left running.
  # The overall bound catches a ctest that waits on a leftover's pipe.
  local rc=0
  # shellcheck disable=SC2016 # expanded by the inner bash
  run_job "$log" unshare --pid --fork --kill-child --mount-proc --propagation private \
    bash -c 'mount --bind "$1" /tmp && shift && timeout -s KILL "$@"' sandbox "$scratch/tmp" \
    $((limit * count + 60)) \
    ctest --test-dir "$build" -R "$regex" --timeout "$limit" -j "$jobs" --stop-on-failure \
    --output-on-failure || rc=$?
  detach_loops
  if grep -q '\*\*\*Not Run\|Could not find executable' "$log"; then return 3; fi
  return "$rc"
}

# What failed, from ctest's summary: "name (Failed)" or "name (Timeout)".
failed_tests() {
  sed -n '/The following tests FAILED:/,$s/^[[:space:]]*[0-9]* - //p' "$1" | paste -sd ';' -
}

if ((baseline)); then
  regex=$(for i in "${selected[@]}"; do printf '%s\n' "${tests[i]}"; done | sort -u | paste -sd '|' -)
  echo "== mutants: baseline: the selected tests pass on the unmutated source"
  if ! run_tests "$regex" "$default_timeout" "$scratch/baseline.log"; then
    tail -60 "$scratch/baseline.log"
    die "the baseline fails ($(failed_tests "$scratch/baseline.log")): fix that first; a mutant can only be killed by a test that passes without it"
  fi
fi

killed=0 survived=0 broken=0
for i in "${selected[@]}"; do
  id=${ids[i]} file=${files[i]}
  mutant_start=$SECONDS
  cp -p "$src/$file" "$scratch/pristine/file"
  content=$(<"$src/$file")
  printf '%s%s%s\n' "${content%%"${finds[i]}"*}" "${replaces[i]}" "${content#*"${finds[i]}"}" \
    >"$src/$file"
  verdict=
  detail=
  # shellcheck disable=SC2086 # the targets are a space-separated list
  if ! run_job "$scratch/mutant.log" cmake --build "$build" -j "$jobs" --target ${builds[i]}; then
    verdict=BROKEN
    detail="does not compile (a mutant must be a plausible bug, not a build error)"
    grep -m3 'error' "$scratch/mutant.log" >&2 || true
  else
    built=$((SECONDS - mutant_start))
    rc=0
    run_tests "${tests[i]}" "${timeouts[i]:-$default_timeout}" "$scratch/mutant.log" || rc=$?
    if ((rc == 0)); then
      verdict=SURVIVED
      detail="every test matching '${tests[i]}' passed: write the test that kills it"
    elif ((rc == 3)); then
      verdict=BROKEN
      detail="its tests could not run: $(tail -3 "$scratch/mutant.log" | paste -sd ' ' -)"
    else
      verdict=KILLED
      detail=$(failed_tests "$scratch/mutant.log")
      [[ -n $detail ]] || detail="ctest exit $rc (run killed at its time limit)"
    fi
  fi
  cp "$scratch/pristine/file" "$src/$file" # a new mtime: the original recompiles (a cache hit)
  case $verdict in
    KILLED) killed=$((killed + 1)) ;;
    SURVIVED) survived=$((survived + 1)) ;;
    *) broken=$((broken + 1)) ;;
  esac
  printf '%-8s %-30s %4d s (build %d s)  %s\n' "$verdict" "$id" $((SECONDS - mutant_start)) \
    "${built:-0}" "$detail"
  if [[ $verdict == SURVIVED ]]; then
    echo "         $file: ${whys[i]}"
  fi
  built=
done

total=${#selected[@]}
echo "== mutants: $killed of $total killed, $survived survived, $broken broken; $((SECONDS - start)) s"
((survived == 0 && broken == 0))
