#!/usr/bin/env bash
# Builds the share-manager image (and with CONTROLLER_TAG the share-controller
# image, from the same builder) from a clean checkout of HEAD (what is
# committed, nothing else of the work tree) with container/build.sh.
# Usage: container/build_head.sh TAG [CONTROLLER_TAG]   (prints the build's tail when it fails)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:?usage: build_head.sh TAG [CONTROLLER_TAG]}
controller_tag=${2:-}
src=$(mktemp -d /tmp/share-manager-head.XXXXXX)
trap 'rm -rf "$src"' EXIT
echo "build_head: $tag${controller_tag:+ and $controller_tag} from a clean checkout of HEAD ($(git -C "$repo" rev-parse --short HEAD))"
git -C "$repo" diff --quiet HEAD || echo "build_head: note: uncommitted changes are not part of this image"
git -C "$repo" archive HEAD | tar -x -C "$src"
start=$(date +%s)
if ! bash "$src/container/build.sh" "$tag" ${controller_tag:+"$controller_tag"} >"$src/build.log" 2>&1; then
  tail -n 40 "$src/build.log"
  echo "build_head: container/build.sh failed"
  exit 1
fi
echo "build_head: built in $(($(date +%s) - start)) s"
grep "^image " "$src/build.log" || true # each image's size
