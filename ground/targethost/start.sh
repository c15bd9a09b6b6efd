#!/usr/bin/env bash
# The target-host half of the ground: the podman network whose subnet is the
# cloud's external network, the git daemon serving the SwarmUI stand-in to the
# hosts, and the agent that makes every ACTIVE server with a floating IP a
# real host at that address. Every process is recorded in $RUN/*.pid.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

podman network exists "$PODNET" ||
  podman network create --driver bridge --subnet "$EXT_CIDR" --gateway "$EXT_GW" "$PODNET" >/dev/null
# The bridge is made here, not by podman on first use, so that the git daemon
# can listen on the hosts' gateway address before any host exists.
bridge=$(podman network inspect "$PODNET" --format '{{.NetworkInterface}}')
echo "$bridge" > "$RUN/bridge"
if ! ip link show "$bridge" >/dev/null 2>&1; then
  ip link add "$bridge" type bridge
  ip addr add "$EXT_GW/${EXT_CIDR#*/}" dev "$bridge"
fi
ip link set "$bridge" up

# The SwarmUI stand-in and its extensions as git repositories, as the swarmui and seed roles clone them
# (publish-standin.sh re-publishes the working copy to a running ground)
rm -rf "$G/git"; mkdir -p "$G/git"
"$GROUND_SRC/targethost/publish-standin.sh"
start_bg git-daemon "$LOG/git-daemon.log" git daemon --reuseaddr --export-all --base-path="$G/git" \
  --listen="$EXT_GW" --port=9418 "$G/git"

# The cloud's API for the hosts: Keystone and Nova listen on loopback; the hosts reach them through
# their gateway (the host-side half of the forwarder runs in each host, see agent.py).
start_bg api-forward "$LOG/api-forward.log" "$OSVENV/bin/python" -m gpu_rent_ground.forward \
  --listen "$EXT_GW" --to "$API" --ports "$HOST_API_PORTS"

# The metadata service at 169.254.169.254, as a Neutron router gives it to its VMs: port 80 of that address,
# coming from the hosts' bridge, is redirected to the proxy on the gateway (metadata_proxy.py says how
# upstream does it). Only packets arriving on the bridge: this machine's own 169.254.169.254 is untouched.
start_bg metadata-proxy "$LOG/metadata-proxy.log" env OS_CLIENT_CONFIG_FILE="$G/clouds.yaml" OS_CLOUD=ground-admin \
  "$OSVENV/bin/python" -m gpu_rent_ground.metadata_proxy --listen "$EXT_GW:$METADATA_PROXY_PORT" \
  --nova "http://$API:8775" --secret-file "$ETC/metadata-secret"
metadata_rule=(PREROUTING -i "$bridge" -d 169.254.169.254/32 -p tcp --dport 80 -j REDIRECT --to-ports "$METADATA_PROXY_PORT")
iptables -t nat -C "${metadata_rule[@]}" 2>/dev/null || iptables -t nat -A "${metadata_rule[@]}"
printf '%q ' "${metadata_rule[@]}" > "$RUN/metadata-rule"

start_bg agent "$LOG/agent.log" env OS_CLIENT_CONFIG_FILE="$G/clouds.yaml" OS_CLOUD=ground-admin \
  "$OSVENV/bin/python" -m gpu_rent_ground.agent --state "$S/hosts" \
  --image localhost/gpu-rent-ground-host:3 --network "$PODNET" \
  --base-rootfs "$CACHE/host/rootfs" --operator-key "$CACHE/host/id_ed25519.pub" \
  --api-gateway "$EXT_GW" --api-ports "$HOST_API_PORTS"
sleep 1
alive "$(cat "$RUN/agent.pid")" || die "the ground agent did not start, see $LOG/agent.log"
alive "$(cat "$RUN/api-forward.pid")" || die "the API forwarder did not start, see $LOG/api-forward.log"
alive "$(cat "$RUN/metadata-proxy.pid")" || die "the metadata proxy did not start, see $LOG/metadata-proxy.log"
log "target hosts: network $PODNET ($EXT_CIDR), SwarmUI stand-in at git://$EXT_GW/SwarmUI.git, metadata at 169.254.169.254, agent running"
