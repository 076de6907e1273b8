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
# Env: JOBS (default 2): mutants tested at a time; MUTANTS_FILE (default
# tests/mutants/mutants.txt); MUTANTS_SCRATCH_PARENT (default /var/tmp).
#
# Each of the JOBS slots has a scratch copy whose build is configured once
# and reused: only the mutated file (and, after it is restored, its original)
# recompiles. With ccache, objects come from the cache (CCACHE_BASEDIR makes
# the copy's paths match those of a build made by scripts/build.sh). Tests run
# in their own PID and mount namespaces with a private /tmp: when a run ends
# or times out, every process it started dies with it and its mounts go; loop
# devices over images in that /tmp are detached. The scratch dir is removed
# at the end, pass or fail.
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

# --- the scratch copies and their builds. Not under /tmp: the tests get a
# private /tmp of their own, and must still reach the builds.
scratch=$(mktemp -d "${MUTANTS_SCRATCH_PARENT:-/var/tmp}/sharemgr-mutants.XXXXXX")
# Mutants run `slots` at a time, each slot with its own copy and build, one
# job each: a mutant's build is mostly one compile and one link, so two
# slots keep both cores busy where one would leave one idle.
slots=$((jobs < ${#selected[@]} ? jobs : ${#selected[@]}))
((slots >= 1)) || slots=1
slot=0
slot_pids=()
cleanup() {
  local status=$? f
  # Every job runs in its own process group: a build's compilers, or a
  # sandbox (whose namespace dies with it), all go at once.
  for f in "$scratch"/job.*; do
    [[ -f $f ]] && kill -KILL -- "-$(<"$f")" 2>/dev/null
  done
  for f in "${slot_pids[@]}"; do kill -KILL "$f" 2>/dev/null; done
  wait 2>/dev/null || true
  for f in "$scratch"/slot.*; do detach_loops "$f/tmp"; done
  rm -rf "$scratch"
  exit "$status"
}
# Runs a command as this slot's job, in its own process group, output to $1.
# A background job and `wait` let a signal's trap run at once.
run_job() {
  local log=$1 rc=0 pid
  shift
  setsid "$@" >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$scratch/job.$slot"
  wait "$pid" || rc=$?
  rm -f "$scratch/job.$slot"
  return "$rc"
}
# Loop devices a killed test left attached to an image in a private /tmp.
detach_loops() {
  local image dev
  [[ -d $1 ]] || return 0
  while IFS= read -r -d '' image; do
    for dev in $(losetup -n -O NAME -j "$image" 2>/dev/null); do
      losetup -d "$dev" 2>/dev/null || true
    done
  done < <(find "$1" -xdev -type f -size +1M -print0 2>/dev/null)
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

launcher=()
# What the selected mutants rebuild, and the test binaries their tests are
# in, built once unmutated.
declare -A target_set=()
for i in "${selected[@]}"; do
  for t in ${builds[i]} ${suites[i]}; do target_set[$t]=1; done
done

# Slot $1: a copy of the tree (uncommitted edits included), its build dir
# inside it as build/ is in the tree (the same relative paths for ccache),
# configured once and built unmutated.
prepare_slot() {
  slot=$1
  local dir=$scratch/slot.$1
  local src=$dir/src
  mkdir -p "$src"
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (
      cd "$root"
      git ls-files -z --cached --others --exclude-standard --deduplicate |
        while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
        xargs -0 cp -a --parents -t "$src"
    )
  else
    tar -C "$root" --exclude='./build*' -cf - . | tar -C "$src" -xf -
  fi
  if command -v ccache >/dev/null; then
    launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$src;CCACHE_NOHASHDIR=true;ccache")
  fi
  run_job "$dir/configure.log" cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHAREMGR_WERROR=ON "${launcher[@]}" || {
    cat "$dir/configure.log"
    return 1
  }
  run_job "$dir/build.log" cmake --build "$src/build" -j $((jobs / slots)) \
    --target "${!target_set[@]}" || {
    tail -40 "$dir/build.log"
    return 1
  }
}

# Runs ctest in slot $slot on the tests matching $1, per-test limit $2, ctest
# -j $3, output to $4, contained: a PID namespace (everything dies with it),
# private mounts, a private /tmp. 0: passed; 3: could not run; else failed.
run_tests() {
  local regex=$1 limit=$2 parallel=$3 log=$4 count rc=0
  local dir=$scratch/slot.$slot
  count=$(ctest --test-dir "$dir/src/build" -N -R "$regex" | sed -n 's/^Total Tests: //p')
  if [[ -z $count || $count == 0 ]]; then
    echo "no test matches '$regex'" >"$log"
    return 3
  fi
  rm -rf "$dir/tmp"
  mkdir -m 1777 "$dir/tmp"
  # The namespace's init is the bash below: when it ends (ctest done, or
  # killed with unshare) the kernel kills whatever the tests left running.
  # The overall bound catches a ctest that waits on a leftover's pipe.
  # shellcheck disable=SC2016 # expanded by the inner bash
  run_job "$log" unshare --pid --fork --kill-child --mount-proc --propagation private \
    bash -c 'mount --bind "$1" /tmp && shift && timeout -s KILL "$@"' sandbox "$dir/tmp" \
    $((limit * count + 60)) \
    ctest --test-dir "$dir/src/build" -R "$regex" --timeout "$limit" -j "$parallel" \
    --stop-on-failure --output-on-failure || rc=$?
  detach_loops "$dir/tmp"
  if grep -q '\*\*\*Not Run\|Could not find executable' "$log"; then return 3; fi
  return "$rc"
}

# What failed, from ctest's summary: "name (Failed)" or "name (Timeout)".
failed_tests() {
  sed -n '/The following tests FAILED:/,$s/^[[:space:]]*[0-9]* - //p' "$1" | paste -sd ';' -
}

# Applies mutant $1 in slot $slot, builds, tests, restores; prints one line
# and records the verdict.
run_mutant() {
  local i=$1 started=$SECONDS built=0 rc=0 verdict detail content
  local dir=$scratch/slot.$slot
  local file=$dir/src/${files[i]}
  cp -p "$file" "$dir/pristine"
  content=$(<"$file")
  printf '%s%s%s\n' "${content%%"${finds[i]}"*}" "${replaces[i]}" "${content#*"${finds[i]}"}" \
    >"$file"
  # The suite too: a test binary that links the mutated code in-process
  # would otherwise run its unmutated build, and the mutant "survive".
  # shellcheck disable=SC2086 # the targets are a space-separated list
  if ! run_job "$dir/mutant.log" cmake --build "$dir/src/build" -j $((jobs / slots)) \
    --target ${builds[i]} ${suites[i]}; then
    verdict=BROKEN
    detail="does not compile (a mutant must be a plausible bug, not a build error): $(grep -m1 'error' "$dir/mutant.log")"
  else
    built=$((SECONDS - started))
    run_tests "${tests[i]}" "${timeouts[i]:-$default_timeout}" $((jobs / slots)) \
      "$dir/mutant.log" || rc=$?
    if ((rc == 0)); then
      verdict=SURVIVED
      detail="every test matching '${tests[i]}' passed: write the test that kills it (${files[i]}: ${whys[i]})"
    elif ((rc == 3)); then
      verdict=BROKEN
      detail="its tests could not run: $(tail -3 "$dir/mutant.log" | paste -sd ' ' -)"
    else
      verdict=KILLED
      detail=$(failed_tests "$dir/mutant.log")
      [[ -n $detail ]] || detail="ctest exit $rc (run killed at its time limit)"
    fi
  fi
  cp "$dir/pristine" "$file" # a new mtime: the original recompiles (a cache hit)
  echo "$verdict" >>"$scratch/verdicts"
  printf '%-8s %-30s %4d s (build %d s)  %s\n' "$verdict" "${ids[i]}" $((SECONDS - started)) \
    "$built" "$detail"
}

start=$SECONDS
echo "== mutants: ${#selected[@]} in $slots scratch builds under $scratch, each building ${!target_set[*]}"
for ((k = 0; k < slots; k++)); do
  prepare_slot "$k" &
  slot_pids+=($!)
done
for pid in "${slot_pids[@]}"; do wait "$pid" || die "the unmutated source does not build"; done
slot_pids=()
slot=0
echo "== mutants: scratch builds ready in $((SECONDS - start)) s"

if ((baseline)); then
  regex=$(for i in "${selected[@]}"; do printf '%s\n' "${tests[i]}"; done | sort -u | paste -sd '|' -)
  echo "== mutants: baseline: the selected tests pass on the unmutated source"
  if ! run_tests "$regex" "$default_timeout" "$jobs" "$scratch/baseline.log"; then
    tail -60 "$scratch/baseline.log"
    die "the baseline fails ($(failed_tests "$scratch/baseline.log")): fix that first; a mutant can only be killed by a test that passes without it"
  fi
fi

touch "$scratch/verdicts"
for ((k = 0; k < slots; k++)); do
  (
    slot=$k
    for ((p = k; p < ${#selected[@]}; p += slots)); do run_mutant "${selected[p]}"; done
  ) &
  slot_pids+=($!)
done
for pid in "${slot_pids[@]}"; do wait "$pid" || true; done
slot_pids=()

killed=$(grep -c '^KILLED$' "$scratch/verdicts" || true)
survived=$(grep -c '^SURVIVED$' "$scratch/verdicts" || true)
total=${#selected[@]}
broken=$((total - killed - survived))
echo "== mutants: $killed of $total killed, $survived survived, $broken broken; $((SECONDS - start)) s"
((survived == 0 && broken == 0))
