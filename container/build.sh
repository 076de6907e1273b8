#!/usr/bin/env bash
# Builds the share-manager image, and with CONTROLLER_TAG the share-controller
# image too, without a Docker daemon: buildah with vfs storage and chroot
# isolation. When the base image cannot be pulled (no registry), one is made
# locally (debootstrap minbase bookworm) and imported under the base image's
# own name, so the Dockerfile builds unchanged.
# Usage: container/build.sh [TAG [CONTROLLER_TAG]]   (default share-manager:dev)
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-share-manager:dev}
controller_tag=${2:-}
base=docker.io/library/debian:bookworm-slim
storage=(--storage-driver vfs)
rootfs=
binaries=
cleanup() {
  [[ -z $rootfs ]] || rm -rf "$rootfs"
  [[ -z $binaries ]] || podman "${storage[@]}" rmi "$binaries" >/dev/null 2>&1 || true
}
trap cleanup EXIT

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

# Imports $rootfs as $base. Its root directory 0755, as in the published
# image: mktemp -d made it 0700, and a non-root user (share-controller's)
# could not even reach /usr.
import_base() {
  chmod 0755 "$rootfs"
  tar -C "$rootfs" -c . | podman "${storage[@]}" import - "$base" >/dev/null
}

if ! podman "${storage[@]}" image exists "$base"; then
  if ! buildah "${storage[@]}" pull --quiet "$base" >/dev/null 2>&1; then
    echo "build.sh: cannot pull $base; making it with debootstrap"
    rootfs=$(mktemp -d /tmp/share-manager-base.XXXXXX)
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
    import_base
  fi
else
  # A base an earlier build.sh imported has a root of 0700: imported again,
  # fixed (the layer is read through its mount, never changed in place).
  old=$(podman "${storage[@]}" image inspect "$base" --format '{{.Id}}')
  mounted=$(podman "${storage[@]}" image mount "$base")
  mode=$(stat -c %a "$mounted")
  if [[ $mode != 755 ]]; then
    echo "build.sh: $base has its root directory at $mode; importing it again at 755"
    rootfs=$(mktemp -d /tmp/share-manager-base.XXXXXX)
    tar -C "$mounted" -c . | tar -x -C "$rootfs"
  fi
  podman "${storage[@]}" image unmount "$base" >/dev/null
  if [[ -n $rootfs ]]; then
    import_base
    podman "${storage[@]}" rmi "$old" >/dev/null 2>&1 || true # unless a build still uses it
  fi
fi

bud=(buildah "${storage[@]}" bud --isolation chroot --pull=never --layers=false -f container/Dockerfile)
if [[ -z $controller_tag ]]; then
  # share-manager alone: its builder compiles that target only.
  "${bud[@]}" --build-arg TARGETS=share-manager --target share-manager -t "$tag" .
else
  # Both: the builder once, then each runtime stage on its binary (the
  # Dockerfile's head says why).
  binaries=localhost/share-manager-binaries:build-$$
  "${bud[@]}" --target binaries -t "$binaries" .
  from_binaries=(--build-context "binaries=container-image://$binaries")
  "${bud[@]}" "${from_binaries[@]}" --target share-manager -t "$tag" .
  "${bud[@]}" "${from_binaries[@]}" --target share-controller -t "$controller_tag" .
fi
for built in "$tag" ${controller_tag:+"$controller_tag"}; do
  podman "${storage[@]}" image inspect "$built" --format 'image {{.RepoTags}}: {{.Size}} bytes unpacked'
done
