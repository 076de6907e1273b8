#!/usr/bin/env bash
# Configures and builds share-manager into build/ (or $BUILD_DIR).
# Usage: scripts/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
# ccache when present. CCACHE_BASEDIR (paths under the tree hashed relative)
# and CCACHE_NOHASHDIR let a copy of the tree elsewhere reuse these objects:
# the mutation check (tests/mutants/run.sh) builds such a copy.
launcher=()
if command -v ccache >/dev/null; then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=true;ccache")
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DSHAREMGR_WERROR=ON \
  "${launcher[@]}" "$@" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-2}"
