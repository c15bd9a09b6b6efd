#!/usr/bin/env bash
# make ground-down: stop exactly what ground-up started - processes by the
# pids it recorded (never by name), the hosts' containers by their label,
# loop devices by their backing files, then the bridge and podman network.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

# everything recorded, with children, so the end can prove none is left
recorded=()
for f in "$RUN"/*.pid; do
  [ -e "$f" ] || continue
  p=$(cat "$f"); alive "$p" && recorded+=("$p" $(descendants "$p"))
done

if [ -d "$RUN" ]; then
  for name in agent git-daemon; do   # the agent first, so it starts no host meanwhile
    [ -f "$RUN/$name.pid" ] && { stop_pids 10 "$(cat "$RUN/$name.pid")"; rm -f "$RUN/$name.pid"; }
  done
fi
if command -v podman >/dev/null; then
  hosts=$(podman ps -aq --filter label=gpu-rent-ground)
  [ -n "$hosts" ] && podman rm -f -t 5 $hosts >/dev/null && log "removed $(echo "$hosts" | wc -w) target hosts"
  podman network exists "$PODNET" 2>/dev/null && podman network rm -f "$PODNET" >/dev/null
fi
for backing in "$S"/hosts/volumes/*.img; do
  [ -e "$backing" ] || continue
  for loop in $(losetup -j "$backing" -O NAME -n 2>/dev/null); do losetup -d "$loop"; done
done
if [ -f "$RUN/metadata-rule" ]; then
  eval "iptables -t nat -D $(cat "$RUN/metadata-rule")" 2>/dev/null
  rm -f "$RUN/metadata-rule"
fi
if [ -f "$RUN/bridge" ]; then
  bridge=$(cat "$RUN/bridge")
  ip link show "$bridge" >/dev/null 2>&1 && ip link del "$bridge"
  rm -f "$RUN/bridge"
fi

services=()
for f in "$RUN"/*.pid; do
  [ -e "$f" ] || continue
  case $(basename "$f" .pid) in mysqld|rabbit|rabbit-beam|epmd) continue ;; esac
  services+=("$(cat "$f")"); rm -f "$f"
done
# children too (gunicorn workers, cinder-volume's per-backend process): none
# may outlive its parent as an orphan
children=()
for p in "${services[@]}"; do children+=($(descendants "$p")); done
[ ${#services[@]} -gt 0 ] && stop_pids 15 "${services[@]}" && log "stopped ${#services[@]} OpenStack services"
[ ${#children[@]} -gt 0 ] && stop_pids 5 "${children[@]}"
for name in rabbit-beam rabbit epmd mysqld; do
  [ -f "$RUN/$name.pid" ] && { stop_pids 30 "$(cat "$RUN/$name.pid")"; rm -f "$RUN/$name.pid"; }
done
rm -f "$RUN"/mysqld.real.pid "$RUN"/mysqld.sock

left=()
for p in "${recorded[@]}"; do alive "$p" && left+=("process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-80))"); done
command -v podman >/dev/null && for c in $(podman ps -aq --filter label=gpu-rent-ground); do left+=("container $c"); done
for backing in "$S"/hosts/volumes/*.img; do
  [ -e "$backing" ] && for loop in $(losetup -j "$backing" -O NAME -n 2>/dev/null); do left+=("loop device $loop"); done
done
while read -r _ target _; do
  case $target in "$G"/*) left+=("mount $target") ;; esac
done < /proc/mounts
if [ ${#left[@]} -gt 0 ]; then
  printf 'ground-down left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
log "ground down: no process, container, loop device or mount left"
exit 0
