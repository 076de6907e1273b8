#!/usr/bin/env bash
# Builds the share-manager image without a Docker daemon: buildah with vfs
# storage and chroot isolation. When the base image cannot be pulled (no
# registry), one is made locally (debootstrap minbase bookworm) and imported
# under the base image's own name, so the Dockerfile builds unchanged.
# Usage: container/build.sh [TAG]   (default share-manager:dev)
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-share-manager:dev}
base=docker.io/library/debian:bookworm-slim
storage=(--storage-driver vfs)

need=()
for tool in buildah podman debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! podman "${storage[@]}" image exists "$base"; then
  if ! buildah "${storage[@]}" pull --quiet "$base" >/dev/null 2>&1; then
    echo "build.sh: cannot pull $base; making it with debootstrap"
    rootfs=$(mktemp -d /tmp/share-manager-base.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase bookworm "$rootfs" >/dev/null
    tar -C "$rootfs" -c . | podman "${storage[@]}" import - "$base" >/dev/null
  fi
fi

buildah "${storage[@]}" bud --isolation chroot --pull=never --layers=false \
  -f container/Dockerfile -t "$tag" .
podman "${storage[@]}" image inspect "$tag" --format 'image {{.RepoTags}}: {{.Size}} bytes unpacked'
