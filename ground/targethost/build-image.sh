#!/usr/bin/env bash
# Build the target-host image (Debian 12, systemd as PID 1, sshd) from a debootstrap
# root filesystem, once; later runs reuse the cached rootfs and image.
# Usage: build-image.sh CACHE_DIR   -> prints the image name
set -euo pipefail
cache=$1
image=localhost/gpu-rent-ground-host:4
rootfs=$cache/rootfs
# What a GPU cloud's Ubuntu/Debian image ships with, so roles meet a realistic host:
# git, curl and python3-apt are present on those images; systemd and sshd are the point.
# python3-venv, python3-pip and wget: what SwarmUI's ComfyUI install needs, so bootstrap's package
# step has nothing to fetch here (the hosts have no internet). zstd: Ollama's release is a .tar.zst,
# which the llm_runtime role unpacks with it (upstream's install.sh needs it too). libgomp1, libvulkan1:
# what llama.cpp's Linux build links and loads, which the role installs where they are missing.
# cloud-init: what every cloud image runs at boot (Debian's own, 22.4.2 in bookworm), reading the server's
# key pair, hostname and user data from the metadata service at 169.254.169.254 (CLOUD_CFG below). Installed
# by apt after debootstrap, whose resolver does not follow virtual packages (python3-cryptography's cffi API).
later_packages=cloud-init
packages=systemd,systemd-sysv,dbus,openssh-server,python3,python3-apt,python3-venv,python3-pip,wget,sudo,iproute2,util-linux,e2fsprogs,xfsprogs,udev,procps,ca-certificates,git,curl,gnupg,locales,less,kmod,zstd,libgomp1,libvulkan1
# CLOUD_CFG_NOTES: what an OpenStack cloud's image sets for it; root logs in with the server's key pair
# (disable_root false), as gpu-rent's SSH_USER=root default expects of Selectel's images. The datasource is named,
# as image builders for one cloud do (ds-identify then takes it without looking at DMI, which cloud-init never
# reads in a container; its detect_openstack takes PID 1's product_name=OpenStack Nova instead, which the
# ground's agent gives each host). Every stage runs as on a VM, the local one too: it finds no cached instance it
# can check (no DMI uuid), so it looks for the metadata service behind DHCP, as DataSourceOpenStackLocal does;
# a host may not touch its network (no CAP_NET_ADMIN: `ip link set eth0 up` is refused), so that look ends at
# once, and the network stage's DataSourceOpenStack reads the same service over the container's network, up
# before init, and tells a new server from a reboot by its instance id. cloud-init writes no network config.
CLOUD_CFG='# gpu-rent ground (targethost/build-image.sh CLOUD_CFG_NOTES)
datasource_list: [ OpenStack, None ]
datasource:
  OpenStack:
    metadata_urls: ["http://169.254.169.254"]
    max_wait: 60
    timeout: 5
    apply_network_config: false
network: {config: disabled}
disable_root: false
'
built_marker="$packages $later_packages $(sha256sum "$0" | cut -c1-12)"  # this script changed: anew

# the marker holds the package list and this script's hash: a change builds the root filesystem anew
if podman image exists "$image" && [ "$(cat "$rootfs/.gpu-rent-ground-built" 2>/dev/null)" = "$built_marker" ]; then
  echo "$image"; exit 0
fi
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
if [ "$(cat "$rootfs/.gpu-rent-ground-built" 2>/dev/null)" != "$built_marker" ]; then
  rm -rf "$rootfs"; mkdir -p "$cache"
  debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { echo "debootstrap failed, see $cache/debootstrap.log" >&2; exit 1; }
  { chroot "$rootfs" apt-get update && DEBIAN_FRONTEND=noninteractive chroot "$rootfs" apt-get install -y \
      --no-install-recommends $later_packages; } >"$cache/apt.log" 2>&1 \
    || { echo "apt-get install $later_packages failed, see $cache/apt.log" >&2; exit 1; }
  # a cloud image's locale: cloud-init's locale module sets LANG=en_US.UTF-8, which update-locale refuses ungenerated
  echo "en_US.UTF-8 UTF-8" > "$rootfs/etc/locale.gen"
  chroot "$rootfs" locale-gen >>"$cache/apt.log" 2>&1 || { echo "locale-gen failed, see $cache/apt.log" >&2; exit 1; }
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/*
  # each boot volume gets host keys of its own: cloud-init makes them at its first boot, as on a VM
  rm -f "$rootfs"/etc/ssh/ssh_host_*
  printf '%s' "$CLOUD_CFG" > "$rootfs/etc/cloud/cloud.cfg.d/90-gpu-rent-ground.cfg"
  : > "$rootfs/etc/machine-id"
  install -d -m 700 "$rootfs/root/.ssh"
  # a container has no console getty to wait for; keep boot quiet and quick
  ln -sf /dev/null "$rootfs/etc/systemd/system/getty@.service"
  ln -sf /dev/null "$rootfs/etc/systemd/system/systemd-udevd.service"
  echo "$built_marker" > "$rootfs/.gpu-rent-ground-built"
fi
tar -C "$rootfs" --exclude=./.gpu-rent-ground-built -c . | podman import \
  --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$image" >"$cache/import.log" 2>&1 \
  || { echo "podman import failed, see $cache/import.log" >&2; exit 1; }
echo "$image"
