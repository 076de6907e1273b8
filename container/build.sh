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

# Makes a debootstrapped tree match the published slim image: no package
# caches or lists, and dpkg told to skip documentation and translations for
# this and every later install (the Dockerfile's apt-get too).
slim_rootfs() {
  local root=$1
  cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
CFG
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,info,locale,groff,lintian}/* \
    "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
    "$root"/var/log/*.log "$root"/var/log/apt/*
}

if ! podman "${storage[@]}" image exists "$base"; then
  if ! buildah "${storage[@]}" pull --quiet "$base" >/dev/null 2>&1; then
    echo "build.sh: cannot pull $base; making it with debootstrap"
    rootfs=$(mktemp -d /tmp/share-manager-base.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    # The host's own Debian mirror and suites (bookworm, -updates, -security),
    # as the published image has them, so the Dockerfile's installs get fixes.
    host_sources=/etc/apt/sources.list.d/debian.sources
    mirror=$(awk '/^URIs:/ {print $2; exit}' "$host_sources" 2>/dev/null || true)
    debootstrap --variant=minbase bookworm "$rootfs" ${mirror:+"$mirror"} >/dev/null
    if [[ -f $host_sources ]]; then
      cp "$host_sources" "$rootfs/etc/apt/sources.list.d/debian.sources"
      rm -f "$rootfs/etc/apt/sources.list"
    fi
    slim_rootfs "$rootfs"
    tar -C "$rootfs" -c . | podman "${storage[@]}" import - "$base" >/dev/null
  fi
fi

buildah "${storage[@]}" bud --isolation chroot --pull=never --layers=false \
  -f container/Dockerfile -t "$tag" .
podman "${storage[@]}" image inspect "$tag" --format 'image {{.RepoTags}}: {{.Size}} bytes unpacked'
