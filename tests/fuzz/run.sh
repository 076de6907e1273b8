#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cc; clang, ASan + UBSan)
# into build-fuzz/ and runs each for FUZZ_SECONDS (default 20) from its seed
# corpus tests/fuzz/corpus/<target>/, two at a time. Fails on any crash,
# leak, UBSan report, timeout or violated property; the input is saved as
# build-fuzz/findings/<target>/crash-* (or leak-*, timeout-*): fix the code,
# then commit the input to the target's corpus as a regression file.
# New inputs found along the way stay in build-fuzz/corpus/<target>/.
# Usage: tests/fuzz/run.sh [target...]   env: FUZZ_SECONDS, JOBS, BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-20}
jobs=${JOBS:-2}

launcher=()
if command -v ccache >/dev/null; then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=true;ccache")
fi
cmake -S . -B "$build_dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DBUILD_TESTING=OFF -DSHAREMGR_FUZZ=ON -DSHAREMGR_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build "$build_dir" -j "$jobs" --target fuzzers

if (($#)); then
  targets=("$@")
else
  targets=()
  for source in tests/fuzz/*_fuzz.cc; do targets+=("$(basename "$source" .cc)"); done
fi

# The port table target writes its file under $TMPDIR: kept in the build dir.
export TMPDIR="$PWD/$build_dir/tmp"
rm -rf "$TMPDIR"
mkdir -p "$TMPDIR" "$build_dir/logs"
trap 'rm -rf "$TMPDIR"' EXIT
# A UBSan report aborts (-fno-sanitize-recover=all) with its stack; leaks fail too.
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# Runs one target; its log in $build_dir/logs/<target>.log.
fuzz() {
  local target=$1 seeds=tests/fuzz/corpus/$1
  if [[ ! -d $seeds ]] || [[ -z $(ls -A "$seeds") ]]; then
    echo "$target: no seed corpus in $seeds" >"$build_dir/logs/$target.log"
    return 1
  fi
  mkdir -p "$build_dir/corpus/$target" "$build_dir/findings/$target"
  # The first corpus dir gets what the run finds; the committed seeds are only read.
  "$build_dir/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build_dir/findings/$target/" \
    "$build_dir/corpus/$target" "$seeds" >"$build_dir/logs/$target.log" 2>&1
}

start=$SECONDS
declare -A pids=()
failed=()
report() {  # target, exit status
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build_dir/logs/$1.log" | grep -o '[0-9]*$' || true)
  if (($2 == 0)); then
    echo "fuzz: $1 ok (${runs:-?} runs)"
  else
    echo "fuzz: $1 FAILED (exit $2); its log, $build_dir/logs/$1.log, ends:"
    tail -n 40 "$build_dir/logs/$1.log"
    failed+=("$1")
  fi
}
for target in "${targets[@]}"; do
  while ((${#pids[@]} >= jobs)); do
    wait -n || true
    for t in "${!pids[@]}"; do
      if ! kill -0 "${pids[$t]}" 2>/dev/null; then
        status=0
        wait "${pids[$t]}" || status=$?
        report "$t" "$status"
        unset "pids[$t]"
      fi
    done
  done
  fuzz "$target" &
  pids[$target]=$!
done
for t in "${!pids[@]}"; do
  status=0
  wait "${pids[$t]}" || status=$?
  report "$t" "$status"
done
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $((SECONDS - start)) s of fuzzing"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $build_dir/findings/)"
  exit 1
fi
