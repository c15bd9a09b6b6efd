#!/usr/bin/env bash
# make ground-up: from a fresh machine of this kind to a running test ground.
# A real OpenStack on 127.0.0.1 whose servers become real target hosts, the
# SwarmUI stand-in, seed data, and a ready project folder at .ground/project.
# Re-running stops the previous ground first and starts from a clean cloud.
set -euo pipefail
T_START=$(date +%s); export T_START
. "$(dirname "$0")/lib.sh"

"$GROUND_SRC/down.sh" >/dev/null 2>&1 || true
# one ground per machine: the cloud's ports and the hosts' subnet are fixed
for port in 3306 5000 5672 8774 9696; do
  if (exec 3<>"/dev/tcp/$API/$port") 2>/dev/null; then
    die "$API:$port is taken: another ground runs (make ground-down in its checkout) or another program holds it"
  fi
done
if ip route show "$EXT_CIDR" 2>/dev/null | grep -q .; then
  die "the hosts' subnet $EXT_CIDR is already routed: another ground runs (make ground-down in its checkout)"
fi
rm -rf "$S" "$ETC" "$LOG" "$RUN" "$G/project" "$G/git"
mkdir -p "$S" "$ETC" "$LOG" "$RUN"
"$GROUND_SRC/install.sh"
# our glue changes with the checkout, the venv is shared: always reinstall it
"$OSVENV/bin/pip" install -q --no-deps --force-reinstall "$GROUND_SRC/ext" >"$LOG/pip-ext.log" 2>&1 \
  || die "installing ground/ext, see $LOG/pip-ext.log"
rm -rf "$GROUND_SRC/ext/build" "$GROUND_SRC"/ext/*.egg-info

# fresh secrets per ground, so tests can prove they never reach a log
# hex: a urlsafe token may begin with '-', and keystone-manage then took it for an option (1 ground in 64)
secret() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }
GROUND_ADMIN_PASSWORD=$(secret) GROUND_MEMBER_PASSWORD=$(secret) GROUND_SERVICE_PASSWORD=$(secret)
GROUND_METADATA_SECRET=$(secret)  # Neutron's metadata proxy and Nova's metadata API share it
export GROUND_ADMIN_PASSWORD GROUND_MEMBER_PASSWORD GROUND_SERVICE_PASSWORD GROUND_METADATA_SECRET
umask 077
echo "$GROUND_METADATA_SECRET" > "$ETC/metadata-secret"
cat > "$G/clouds.yaml" <<CONF
clouds:
  ground:
    auth:
      auth_url: http://$API:5000/v3
      username: gpu-rent-user
      password: $GROUND_MEMBER_PASSWORD
      project_name: gpu-rent
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
  ground-admin:
    auth:
      auth_url: http://$API:5000/v3
      username: admin
      password: $GROUND_ADMIN_PASSWORD
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
CONF
umask 022

"$GROUND_SRC/openstack/start.sh"
"$GROUND_SRC/targethost/start.sh"

# a ready project folder made the way a newcomer makes one: gpu-rent setup, checked against the cloud
P=$G/project
mkdir -p "$P"
ssh-keygen -q -t ed25519 -N '' -C gpu-rent-ground-user -f "$P/id_ed25519"
GPU_RENT=$REPO/.venv/bin/gpu-rent
[ -x "$GPU_RENT" ] || die "no $GPU_RENT: make setup first (make ground-up does it)"
# The A100 flavor never fits on the ground (No valid host): the fallbacks are exercised. The --set values are the
# ground's own: small disks, the stand-in's repository, hosts without a GPU (on a real cloud that is an error).
(cd "$P" && "$GPU_RENT" setup --non-interactive --cloud ground --clouds-yaml "$G/clouds.yaml" \
    --pool ru-7a --flavor gpu.a100.1 --flavor-fallback gpu.l4.1 --flavor-fallback gpu.a10.1 \
    --image "Debian 12 64-bit GPU optimized" --key "$P/id_ed25519" --price-per-hour 1.35 \
    --operator-cidr "$EXT_GW/32" --set 'VOLUME_TYPE=fast.{pool}' --set BOOT_VOLUME_GB=10 --set DATA_VOLUME_GB=4 \
    --set "SWARMUI_REPO=git://$EXT_GW/SwarmUI.git" --set SWARMUI_VERSION=0.9.8.2-standin --set REQUIRE_GPU=false
) >"$LOG/setup.log" 2>&1 || die "gpu-rent setup of the ground's project failed, see $LOG/setup.log"
log "ground ready in $(( $(date +%s) - T_START ))s: clouds.yaml at $G/clouds.yaml, project at $P"
"$GROUND_SRC/memory.sh" >&2 || true
