#!/usr/bin/env bash
# Installs the pinned schema validator (npm ci, from package-lock.json) into
# WORK_DIR, once per lock file, then validates container/k8s with it.
# Usage: tests/container/check_manifests.sh WORK_DIR   (ctest label "container")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: check_manifests.sh WORK_DIR}
mkdir -p "$work"
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
fi
NODE_PATH=$work/node_modules node "$here/validate_manifests.js"
