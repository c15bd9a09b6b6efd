#!/usr/bin/env bash
# Install what the ground needs on a fresh machine of this kind; cached, so a
# second run takes seconds. Debian packages, the OpenStack virtualenv (pinned
# by openstack/requirements.lock) and the target-host image. --apt-only: the
# Debian packages alone.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

apt_packages="mariadb-server rabbitmq-server podman runc debootstrap iproute2 iptables
  openssh-client openssh-server e2fsprogs xfsprogs util-linux git curl socat uidmap zstd"
missing=()
for p in $apt_packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt: installing ${missing[*]}"
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then   # no systemd here: keep postinst from starting daemons
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created_policy=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"${TMPDIR:-/tmp}/ground-apt.log" 2>&1 \
    || { [ $created_policy = 1 ] && rm -f /usr/sbin/policy-rc.d; die "apt-get install failed, see ${TMPDIR:-/tmp}/ground-apt.log"; }
  [ $created_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
fi
# --apt-only: the Debian packages alone (make test installs them before the offline tests start beside ground-up)
[ "${1:-}" = --apt-only ] && exit 0

if [ ! -e "$OSVENV/.installed" ]; then
  log "pip: OpenStack 2026.1 into $OSVENV (pinned)"
  rm -rf "$OSVENV"; mkdir -p "$CACHE"
  python3 -m venv "$OSVENV"
  { "$OSVENV/bin/pip" install -q -U 'pip==26.3' &&
    "$OSVENV/bin/pip" install -q --no-deps -r "$GROUND_SRC/openstack/requirements.lock"; } >"$CACHE/pip.log" 2>&1 \
    || die "pip install failed, see $CACHE/pip.log"
  touch "$OSVENV/.installed"
fi

"$GROUND_SRC/targethost/setup-podman.sh"
if ! podman image exists localhost/gpu-rent-ground-host:3; then
  log "building the target-host image (debootstrap, once)"
fi
"$GROUND_SRC/targethost/build-image.sh" "$CACHE/host" >/dev/null
[ -f "$CACHE/host/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C gpu-rent-ground-operator -f "$CACHE/host/id_ed25519"
log "install done"
