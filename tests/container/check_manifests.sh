#!/usr/bin/env bash
# Installs the pinned schema validator (npm ci, from package-lock.json) into
# WORK_DIR, once per lock file, then validates container/k8s with it: as
# shipped (the nodes' network still a placeholder) the manifests must be
# refused, saying what to replace; with a node network filled in, they pass.
# Usage: tests/container/check_manifests.sh WORK_DIR   (ctest label "container")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: check_manifests.sh WORK_DIR}
mkdir -p "$work"
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
fi
export NODE_PATH=$work/node_modules
if shipped=$(node "$here/validate_manifests.js"); then
  echo "$shipped"
  echo "FAIL the manifests as shipped were accepted: they must carry REPLACE_WITH_NODE_CIDR, not a network"
  exit 1
fi
if ! grep -q "^FAIL .*REPLACE_WITH_NODE_CIDR is still here" <<<"$shipped"; then
  echo "$shipped"
  echo "FAIL the manifests as shipped were refused, but not for the node network placeholder"
  exit 1
fi
echo "ok   the manifests as shipped are refused until the nodes' network replaces the placeholder"
node "$here/validate_manifests.js" --node-cidr 10.0.0.0/16
