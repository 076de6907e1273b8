#!/usr/bin/env bash
# Configures and builds share-manager into build/ (or $BUILD_DIR).
# Usage: scripts/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DSHAREMGR_WERROR=ON "$@" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-2}"
