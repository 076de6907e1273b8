#!/usr/bin/env bash
# One style: every C++ file as .clang-format says, every shell script clean
# under shellcheck. Lists what is off and fails; fixes nothing.
# Usage: tests/style_check.sh   (ctest: "style: ...", label unit)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -d .git ]]; then
  mapfile -t cxx < <(git ls-files '*.cc' '*.h')
  mapfile -t sh < <(git ls-files '*.sh' .ci/run)
else # an unpacked source tarball
  mapfile -t cxx < <(find proto base metrics supervisor sharemgr controller tests bench -name '*.cc' -o -name '*.h')
  mapfile -t sh < <(find scripts container tests bench -name '*.sh'; echo .ci/run)
fi
status=0
clang-format --dry-run -Werror "${cxx[@]}" || status=1
shellcheck -x "${sh[@]}" || status=1
echo "${#cxx[@]} C++ files, ${#sh[@]} shell scripts checked"
exit $status
