#!/usr/bin/env bash
# Build the root filesystem of the simulator's base image and tar it, fully offline
# from any container registry: only the Debian mirror is needed.
#
#   build-base.sh SUITE MIRROR OUT_TAR PACKAGE...
#
# harness/servers/images.py calls this and imports OUT_TAR as specgate/sim-base:<hash>.
# Needs root and debootstrap (scripts/ensure_docker.sh installs it). ~1 minute.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 SUITE MIRROR OUT_TAR PACKAGE..." >&2; exit 2; }
suite=$1 mirror=$2 out=$3
shift 3
include=$(IFS=,; echo "$*")

work=$(mktemp -d "$(dirname "$out")/rootfs.XXXXXX")
rootfs=$work/rootfs
cleanup() {
  # debootstrap mounts proc/sys inside the rootfs and may leave them mounted when it
  # fails: unmount first, and never let rm cross into another file system.
  for m in dev/pts dev sys proc; do umount -l "$rootfs/$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

echo "debootstrap --variant=minbase $suite ($include) from $mirror" >&2
if ! debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
  echo "debootstrap failed; its last lines:" >&2
  tail -n 20 "$work/debootstrap.log" >&2
  exit 1
fi

# Trim what a server image never reads (~140 MB): package lists and caches (apt-get
# update refreshes them when someone debugs inside), docs, man pages, translations.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/debootstrap
# Like Debian's official images: no daemons start inside, machine-id is per container.
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod +x "$rootfs/usr/sbin/policy-rc.d"
: >"$rootfs/etc/machine-id"

# /dev, /proc and /sys are provided by the container runtime.
tar --numeric-owner --xattrs -C "$rootfs" \
  --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf "$out" .
echo "rootfs: $(du -sh --one-file-system "$rootfs" | cut -f1), tar: $(du -sh "$out" | cut -f1)" >&2
