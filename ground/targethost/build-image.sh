#!/usr/bin/env bash
# Build the target-host image (Debian 12, systemd as PID 1, sshd) from a debootstrap
# root filesystem, once; later runs reuse the cached rootfs and image.
# Usage: build-image.sh CACHE_DIR   -> prints the image name
set -euo pipefail
cache=$1
image=localhost/gpu-rent-ground-host:3
rootfs=$cache/rootfs
# What a GPU cloud's Ubuntu/Debian image ships with, so roles meet a realistic host:
# git, curl and python3-apt are present on those images; systemd and sshd are the point.
# python3-venv, python3-pip and wget: what SwarmUI's ComfyUI install needs, so bootstrap's package
# step has nothing to fetch here (the hosts have no internet). zstd: Ollama's release is a .tar.zst,
# which the llm_runtime role unpacks with it (upstream's install.sh needs it too). libgomp1, libvulkan1:
# what llama.cpp's Linux build links and loads, which the role installs where they are missing.
packages=systemd,systemd-sysv,dbus,openssh-server,python3,python3-apt,python3-venv,python3-pip,wget,sudo,iproute2,util-linux,e2fsprogs,xfsprogs,udev,procps,ca-certificates,git,curl,gnupg,locales,less,kmod,zstd,libgomp1,libvulkan1

# the marker holds the package list: a changed list builds the root filesystem anew
if podman image exists "$image" && [ "$(cat "$rootfs/.gpu-rent-ground-built" 2>/dev/null)" = "$packages" ]; then
  echo "$image"; exit 0
fi
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
if [ "$(cat "$rootfs/.gpu-rent-ground-built" 2>/dev/null)" != "$packages" ]; then
  rm -rf "$rootfs"; mkdir -p "$cache"
  debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { echo "debootstrap failed, see $cache/debootstrap.log" >&2; exit 1; }
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/*
  # each boot volume gets host keys of its own (made when its root filesystem is made)
  rm -f "$rootfs"/etc/ssh/ssh_host_*
  : > "$rootfs/etc/machine-id"
  install -d -m 700 "$rootfs/root/.ssh"
  # a container has no console getty to wait for; keep boot quiet and quick
  ln -sf /dev/null "$rootfs/etc/systemd/system/getty@.service"
  ln -sf /dev/null "$rootfs/etc/systemd/system/systemd-udevd.service"
  echo "$packages" > "$rootfs/.gpu-rent-ground-built"
fi
tar -C "$rootfs" --exclude=./.gpu-rent-ground-built -c . | podman import \
  --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$image" >"$cache/import.log" 2>&1 \
  || { echo "podman import failed, see $cache/import.log" >&2; exit 1; }
echo "$image"
