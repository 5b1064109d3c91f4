#!/usr/bin/env bash
# Build the node image the molecule scenarios run: Debian bookworm (the base of
# Raspberry Pi OS bookworm) with systemd as PID 1 and sshd, from Debian packages
# with debootstrap, imported into the local Docker engine: no registry needed.
#
#   molecule/images/build.sh [amd64|arm64]      -> local/debian-systemd:bookworm[-arm64]
#
# Skips the build when the image exists (FORCE=1 rebuilds).
set -euo pipefail
arch="${1:-amd64}"
tag="local/debian-systemd:bookworm$([ "$arch" = amd64 ] || echo "-$arch")"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "image $tag exists"
  exit 0
fi
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
if [ "$arch" != "$(dpkg --print-architecture)" ]; then
  # Another architecture's programs run through qemu-user-static, registered
  # with binfmt_misc (flag F: usable inside containers too).
  qemu="/proc/sys/fs/binfmt_misc/qemu-$( [ "$arch" = arm64 ] && echo aarch64 || echo "$arch")"
  if ! grep -qs '^enabled' "$qemu"; then
    echo "error: $arch programs cannot run here: $qemu is not enabled. Fix (as root):" >&2
    echo "  apt-get install qemu-user-static binfmt-support" >&2
    echo "  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable" >&2
    exit 1
  fi
fi

rootfs="$(mktemp -d /tmp/rootfs-bookworm-XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
started=$(date +%s)
debootstrap --variant=minbase --arch="$arch" \
  --include=systemd,systemd-sysv,dbus,python3,openssh-server,sudo,iproute2,ca-certificates \
  bookworm "$rootfs" "$mirror" >/dev/null
# A container has no console to get: keep systemd from waiting on one, and let
# sshd start without the host keys a real install would make at first boot.
chroot "$rootfs" systemctl mask getty@tty1.service serial-getty@.service \
  systemd-remount-fs.service sys-kernel-config.mount >/dev/null 2>&1 || true
# Host keys are made at each container's first boot, so every node has its own.
rm -f "$rootfs"/etc/ssh/ssh_host_*
mkdir -p "$rootfs/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
  > "$rootfs/etc/systemd/system/ssh.service.d/host-keys.conf"
echo "deb $mirror bookworm main" > "$rootfs/etc/apt/sources.list"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import --change 'CMD ["/lib/systemd/systemd"]' - "$tag" >/dev/null
echo "built $tag in $(( $(date +%s) - started )) s"
