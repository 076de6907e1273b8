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
# With --branches, instead: clang's source-based coverage, which counts
# exactly the branches written in the source (gcc -O0 counts compiler cleanup
# edges too), into build-coverage-clang/ (or $CLANG_BUILD_DIR), coverage/:
#   branch-summary.txt   region, line and branch coverage per folder
#   untaken-branches.txt supervisor/, sharemgr/, controller/: every condition
#                        with a side never taken, by file and function:
#                        file:line:column, the side (true, false, both), the
#                        source line
#   unexplained.txt      the branches of that list whose file and line
#                        docs/COVERAGE.md's branch table does not name
# docs/COVERAGE.md explains every uncovered group.
# Usage: scripts/coverage.sh [--branches] [--report-only]   (--report-only: no
# build, no tests; the report again from the counters the last run left)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build_dir=${BUILD_DIR:-build-coverage}
out=$build_dir/coverage
folders=(base metrics supervisor sharemgr controller)
listed=(supervisor sharemgr controller)

report_only=false branches=false
for arg in "$@"; do
  case $arg in
    --report-only) report_only=true ;;
    --branches) branches=true ;;
    *) echo "usage: scripts/coverage.sh [--branches] [--report-only]" >&2; exit 2 ;;
  esac
done
status=0

# clang 16, not the clang 14 of the thread-safety build: clang 14 refuses a
# lambda that captures a structured binding (doctest's CAPTURE and
# REQUIRE_MESSAGE are lambdas; tests/integration has such cases) and has no
# std::source_location (tests/support/require_ok.h).
branch_report() {
  local cbuild=${CLANG_BUILD_DIR:-build-coverage-clang}
  local cout=$cbuild/coverage profiles=$root/$cbuild/profiles
  local cov=llvm-cov-16 profdata=llvm-profdata-16
  if ! command -v clang++-16 >/dev/null || ! command -v $cov >/dev/null || ! command -v jq >/dev/null; then
    echo "coverage: installing clang-16 llvm-16 libclang-rt-16-dev jq"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends clang-16 llvm-16 libclang-rt-16-dev jq
  fi
  if ! $report_only; then
    echo "== source-based coverage build ($cbuild, clang 16 -O0 -fprofile-instr-generate -fcoverage-mapping)"
    local launcher=()
    if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
    # -funique-internal-linkage-names: a static function or lambda is named
    # after its file's base name only, so sharemgr/main.cc's and
    # controller/cmd/main.cc's `main::$_0` would share one counter; this adds a
    # hash of the file's path to such names.
    BUILD_DIR=$cbuild BUILD_TYPE=Debug bash scripts/build.sh "${launcher[@]}" \
      -DCMAKE_CXX_COMPILER=clang++-16 \
      -DCMAKE_CXX_FLAGS="-fprofile-instr-generate -fcoverage-mapping -funique-internal-linkage-names -O0" \
      -DCMAKE_EXE_LINKER_FLAGS=-fprofile-instr-generate \
      -DCMAKE_SHARED_LINKER_FLAGS=-fprofile-instr-generate
    rm -rf "$profiles"
    mkdir -p "$profiles"
    # Every instrumented process writes its own profile when it exits
    # normally: the test binaries, and the share-manager and share-controller
    # processes they start, which inherit the environment (ChildProcess execs
    # with `environ`). An absolute path: the daemons run in other directories.
    export LLVM_PROFILE_FILE=$profiles/%p-%m.profraw
    echo "== unit tests"
    ctest --test-dir "$cbuild" -L unit -j2 --output-on-failure || status=1
    echo "== integration tests"
    ctest --test-dir "$cbuild" -L integration -j2 --output-on-failure || status=1
    unset LLVM_PROFILE_FILE
    ((status == 0)) || echo "coverage: some tests failed; the report covers what ran" >&2
  fi

  rm -rf "$cout"
  mkdir -p "$cout"
  echo "== source-level branch report ($cout, from $(find "$profiles" -name '*.profraw' | wc -l) profiles)"
  find "$profiles" -name '*.profraw' >"$cout/profiles.list"
  $profdata merge -sparse -f "$cout/profiles.list" -o "$cout/merged.profdata"
  # Every binary that ran (the first one bare, the others after -object): a
  # source file's counters are merged across them. llvm-cov.log then says
  # "N functions have mismatched data": an inline function a binary does not
  # use has a placeholder record there; the binaries that use it count it.
  local objects=() b
  for b in "$cbuild"/sharemgr/share-manager "$cbuild"/controller/share-controller "$cbuild"/tests/*_tests; do
    if [[ -x $b ]]; then objects+=(${objects[0]+-object} "$b"); fi
  done
  local cov_args=("${objects[@]}" -instr-profile "$cout/merged.profdata")

  {
    echo "source-based coverage (clang 16) of the unit + integration tests, $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo no-git)"
    printf '%-12s %-22s %-22s %-22s %-22s\n' folder regions functions lines branches
    local f
    for f in "${folders[@]}" total; do
      local srcs=()
      if [[ $f == total ]]; then
        for b in "${folders[@]}"; do srcs+=("$root/$b"); done
      else
        srcs=("$root/$f")
      fi
      # The TOTAL row: regions, missed, cover, functions, missed, executed,
      # lines, missed, cover, branches, missed, cover.
      $cov report "${cov_args[@]}" -show-branch-summary "${srcs[@]}" 2>>"$cout/llvm-cov.log" | awk -v name="$f" '
        function pct(n, missed) { return n ? sprintf("%5.1f%% %5d/%-5d", 100 * (n - missed) / n, n - missed, n) : "     -" }
        $1 == "TOTAL" { printf "%-12s %-22s %-22s %-22s %-22s\n", name, pct($2, $3), pct($5, $6), pct($8, $9), pct($11, $12) }'
    done
  } >"$cout/branch-summary.txt"

  # Each branch as file, line, column, true count, false count, summed over
  # every copy of it (a template or inline function has one per instantiation
  # and binary), and each function as name, file, first and last line.
  local listed_srcs=()
  for f in "${listed[@]}"; do listed_srcs+=("$root/$f"); done
  $cov export -format=text -skip-expansions "${cov_args[@]}" "${listed_srcs[@]}" \
    >"$cout/export.json" 2>>"$cout/llvm-cov.log"
  jq -r '.data[0].files[] | .filename as $f | .branches | group_by([.[0], .[1]])[]
    | [$f, .[0][0], .[0][1], (map(.[4]) | add), (map(.[5]) | add)] | @tsv' \
    "$cout/export.json" >"$cout/branches.tsv"
  # A function's name loses the file prefix of a static function
  # (file.cc:_Z...) and the suffix -funique-internal-linkage-names adds, then,
  # demangled, its template arguments, parameters,
  # return type and project namespace; a lambda counts as the function it is
  # written in (clang names a lambda $_N, or 'lambda' inside a template).
  jq -r '.data[0].functions[] | select(.regions | length > 0)
    | [.name, .filenames[.regions[0][5]], .regions[0][0], .regions[0][2]] | @tsv' \
    "$cout/export.json" | sed -E 's/^[^\t:]+\.(cc|h)://; s/\.__uniq\.[0-9]+//' | llvm-cxxfilt-16 |
    awk -F'\t' -v OFS='\t' '{
      name = $1
      gsub(/\(anonymous namespace\)::|\[abi:cxx11\]/, "", name)
      while (gsub(/<[^<>]*>/, "", name)) {}
      while (gsub(/\([^()]*\)/, "", name)) {}
      if ((k = index(name, "::$_")) > 0) name = substr(name, 1, k - 1)
      if ((k = index(name, "::\047lambda")) > 0) name = substr(name, 1, k - 1)
      sub(/ const$/, "", name); sub(/^.* /, "", name)
      sub(/^(base|supervisor|sharemgr|controller)::/, "", name)
      $1 = name; print
    }' >"$cout/functions.tsv"
  rm "$cout/export.json"

  # untaken-branches.txt: per file, per function (the innermost function
  # holding the branch; a lambda counts as the function it is written in).
  awk -F'\t' -v OFS='\t' '
    FNR == 1 { pass++ }
    pass == 1 {
      n = ++nf[$2]; fname[$2, n] = $1; ffirst[$2, n] = $3 + 0; flast[$2, n] = $4 + 0
      next
    }
    $4 + 0 > 0 && $5 + 0 > 0 { next }
    {
      line = $2 + 0
      side = ($4 + 0 == 0 && $5 + 0 == 0) ? "both" : ($4 + 0 == 0 ? "true" : "false")
      fn = "(outside any function)"; span = 1e9
      for (i = 1; i <= nf[$1]; i++)
        if (ffirst[$1, i] <= line && flast[$1, i] >= line && flast[$1, i] - ffirst[$1, i] < span) {
          span = flast[$1, i] - ffirst[$1, i]; fn = fname[$1, i]
        }
      print $1, line, $3, fn, side, $4, $5
    }' "$cout/functions.tsv" "$cout/branches.tsv" | sort -t$'\t' -k1,1 -k2,2n -k3,3n |
    awk -F'\t' -v root="$root/" '
      $1 != lastfile {
        rel = substr($1, length(root) + 1)
        print "== " rel; lastfile = $1; lastfn = "\n"
        split("", text); nsrc = 0
        while ((getline src < $1) > 0) text[++nsrc] = src
        close($1)
      }
      $4 != lastfn { print "-- " $4; lastfn = $4 }
      { t = text[$2]; sub(/^[ \t]+/, "", t)
        printf "%s:%d:%d: %s never taken (true %d, false %d): %s\n", rel, $2, $3, $5, $6, $7, t }' \
      >"$cout/untaken-branches.txt"
  touch "$cout/untaken-branches.txt"

  # unexplained.txt: a listed branch whose file and line no row of the branch
  # table in docs/COVERAGE.md names ("| path/file.cc `Function` | 12, 30-31 |").
  awk -v dest="$cout/unexplained.txt" '
    FNR == 1 { pass++ }
    pass == 1 && /^## Untaken source-level branches/ { inside = 1; next }
    pass == 1 && /^## / { inside = 0 }
    pass == 1 && inside && /^\| [a-z]+\/[^ ]+ / {
      split($0, cell, "|"); file = cell[2]; sub(/^ /, "", file); sub(/ .*/, "", file)
      nl = split(cell[3], parts, ",")
      for (i = 1; i <= nl; i++) {
        p = parts[i]; gsub(/[^0-9-]/, "", p)
        if (split(p, ab, "-") == 2) { for (l = ab[1]; l <= ab[2]; l++) named[file ":" l] = 1 }
        else if (p != "") named[file ":" p] = 1
      }
      next
    }
    pass == 2 && /^[a-z]+\/[^:]+:[0-9]+:[0-9]+: / {
      split($0, a, ":")
      if (!((a[1] ":" a[2]) in named)) print > dest
    }' docs/COVERAGE.md "$cout/untaken-branches.txt"
  touch "$cout/unexplained.txt"

  cat "$cout/branch-summary.txt"
  echo "untaken source-level branches: $(grep -c '^[a-z].*:[0-9]*:[0-9]*: ' "$cout/untaken-branches.txt" || true)" \
    "($cout/untaken-branches.txt); not named in docs/COVERAGE.md:" \
    "$(grep -c . "$cout/unexplained.txt" || true) ($cout/unexplained.txt)"
  exit $status
}
if $branches; then branch_report; fi

if ! command -v lcov >/dev/null; then
  echo "coverage: installing lcov"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq lcov
fi

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
