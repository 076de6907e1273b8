#!/usr/bin/env bash
# Line, function and branch coverage of the unit and integration tests (a
# report, not a gate: no target number, not part of scripts/test.sh or CI).
# Builds with --coverage at -O0 into build-coverage/ (or $BUILD_DIR), runs the
# `unit` and `integration` labels (integration needs root and real ganesha),
# and writes into <build dir>/coverage/:
#   summary.txt          line/function/branch coverage per folder
#   uncovered-lines.txt  supervisor/, sharemgr/, controller/: every line never
#                        run, grouped by file and function, with its source
#   untaken-branches.txt the same folders: lines that ran but left a branch
#                        never taken (exception edges excluded)
#   html/                lcov's HTML report of the same folders
# docs/COVERAGE.md explains every uncovered group.
# Usage: scripts/coverage.sh [--report-only]   (--report-only: no build, no
# tests; the report again from the counters the last run left)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build_dir=${BUILD_DIR:-build-coverage}
out=$build_dir/coverage
folders=(base supervisor sharemgr controller)
listed=(supervisor sharemgr controller)

if ! command -v lcov >/dev/null; then
  echo "coverage: installing lcov"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq lcov
fi

report_only=false
[[ ${1:-} == --report-only ]] && report_only=true
status=0
if ! $report_only; then
  echo "== coverage build ($build_dir, -O0 --coverage)"
  # ccache without a base dir: it then hashes the build dir, so a cached object
  # never carries another tree's .gcda path.
  launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  BUILD_DIR=$build_dir BUILD_TYPE=Debug bash scripts/build.sh "${launcher[@]}" \
    -DCMAKE_CXX_FLAGS="--coverage -O0 -g" -DCMAKE_EXE_LINKER_FLAGS=--coverage \
    -DCMAKE_SHARED_LINKER_FLAGS=--coverage

  # Counters of an earlier run would add up with this one's.
  lcov --quiet --zerocounters --directory "$build_dir"

  echo "== unit tests"
  ctest --test-dir "$build_dir" -L unit -j2 --output-on-failure || status=1
  echo "== integration tests"
  ctest --test-dir "$build_dir" -L integration -j2 --output-on-failure || status=1
  ((status == 0)) || echo "coverage: some tests failed; the report covers what ran" >&2
fi

rm -rf "$out"
mkdir -p "$out"

echo "== report ($out)"
rc=(--rc lcov_branch_coverage=1 --rc geninfo_no_exception_branch=1)
lcov --quiet "${rc[@]}" --capture --directory "$build_dir" --base-directory "$root" \
  --output-file "$out/all.info" 2>"$out/lcov.log"
patterns=()
for f in "${folders[@]}"; do patterns+=("$root/$f/*"); done
lcov --quiet "${rc[@]}" --extract "$out/all.info" "${patterns[@]}" --output-file "$out/project.info"

{
  echo "coverage of the unit + integration tests, $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo no-git)"
  printf '%-12s %-22s %-22s %-22s\n' folder lines functions branches
  for f in "${folders[@]}" total; do
    if [[ $f == total ]]; then
      info=$out/project.info
    else
      info=$out/$f.info
      lcov --quiet "${rc[@]}" --extract "$out/project.info" "$root/$f/*" --output-file "$info"
    fi
    # Sums the LF/LH, FNF/FNH and BRF/BRH records lcov wrote per file.
    awk -v name="$f" -F: '
      $1 == "LF" { lf += $2 } $1 == "LH" { lh += $2 }
      $1 == "FNF" { ff += $2 } $1 == "FNH" { fh += $2 }
      $1 == "BRF" { bf += $2 } $1 == "BRH" { bh += $2 }
      function pct(h, n) { return n ? sprintf("%5.1f%% %5d/%-5d", 100 * h / n, h, n) : "     -" }
      END { printf "%-12s %-22s %-22s %-22s\n", name, pct(lh, lf), pct(fh, ff), pct(bh, bf) }' "$info"
  done
} >"$out/summary.txt"

# uncovered-lines.txt and untaken-branches.txt: per file, per function (the
# function whose first line is the closest before the line), with the source.
list_infos=()
for f in "${listed[@]}"; do list_infos+=("$out/$f.info"); done
cat "${list_infos[@]}" | c++filt | awk -v root="$root/" -v lines="$out/uncovered-lines.txt" \
  -v branches="$out/untaken-branches.txt" '
  function flush(   i, j, n, fn, last, src, k, nsrc) {
    if (file == "") return
    rel = substr(file, length(root) + 1)
    nsrc = 0
    while ((getline src < file) > 0) text[++nsrc] = src
    close(file)
    for (k = 0; k < 2; k++) {
      dest = k ? branches : lines
      last = ""; header = 0
      for (i = 1; i <= nsrc; i++) {
        if (k ? !((i in run) && (i in untaken)) : !(i in zero)) continue
        fn = "(outside any function)"; best = 0
        for (j in fnline) if (fnline[j] <= i && fnline[j] > best) { best = fnline[j]; fn = j }
        sub(SUBSEP ".*", "", fn)
        if (!header) { print "== " rel > dest; header = 1 }
        if (fn != last) { print "-- " fn > dest; last = fn }
        t = text[i]; sub(/^[ \t]+/, "", t)
        printf "%s:%d: %s%s\n", rel, i, t, (k ? "  [" untaken[i] " of " total[i] " not taken]" : "") > dest
      }
    }
    delete zero; delete run; delete untaken; delete total; delete fnline; delete text
    file = ""
  }
  /^SF:/ { flush(); file = substr($0, 4); next }
  # A lambda counts as the function it is written in (lines after it are that
  # function'"'"'s too); names lose the anonymous namespace and the parameters.
  /^FN:/ {
    s = substr($0, 4); c = index(s, ","); name = substr(s, c + 1)
    gsub(/\(anonymous namespace\)::/, "", name)
    if ((k = index(name, "::{lambda")) > 0) name = substr(name, 1, k - 1)
    if ((k = index(name, "(")) > 0) name = substr(name, 1, k - 1)
    l = substr(s, 1, c - 1) + 0
    fnline[name SUBSEP l] = l
    next
  }
  /^DA:/ { split(substr($0, 4), a, ","); if (a[2] + 0 == 0) zero[a[1] + 0] = 1; else run[a[1] + 0] = 1; next }
  /^BRDA:/ {
    split(substr($0, 6), a, ","); l = a[1] + 0
    total[l]++
    if (a[4] == "0" || a[4] == "-") untaken[l]++
    next
  }
  /^end_of_record/ { flush() }
  END { flush() }'
touch "$out/uncovered-lines.txt" "$out/untaken-branches.txt"

genhtml --quiet "${rc[@]}" --demangle-cpp --prefix "$root" --output-directory "$out/html" \
  "$out/project.info" >/dev/null 2>>"$out/lcov.log" || echo "coverage: genhtml failed (see $out/lcov.log)" >&2

cat "$out/summary.txt"
echo "uncovered lines: $(grep -c '^[a-z].*:[0-9]*: ' "$out/uncovered-lines.txt" || true)" \
  "(${out}/uncovered-lines.txt); lines with an untaken branch:" \
  "$(grep -c '^[a-z].*:[0-9]*: ' "$out/untaken-branches.txt" || true) (${out}/untaken-branches.txt)"
exit $status
