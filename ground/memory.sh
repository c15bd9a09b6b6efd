#!/usr/bin/env bash
# Memory of the whole ground: every recorded process and its children, plus the
# target-host containers (PSS, from /proc/*/smaps_rollup).
. "$(dirname "$0")/lib.sh"
pids=()
for f in "$RUN"/*.pid; do
  [ -e "$f" ] || continue
  p=$(cat "$f"); alive "$p" || continue
  pids+=("$p" $(descendants "$p"))
done
for c in $(podman ps -q --filter label=gpu-rent-ground 2>/dev/null); do
  p=$(podman inspect -f '{{.State.Pid}}' "$c"); conmon=$(podman inspect -f '{{.State.ConmonPid}}' "$c")
  pids+=("$p" $(descendants "$p") "$conmon")
done
kb=0
for p in $(printf '%s\n' "${pids[@]}" | sort -u); do
  v=$(awk '/^Pss:/{print $2}' "/proc/$p/smaps_rollup" 2>/dev/null) && kb=$((kb + ${v:-0}))
done
echo "ground memory: $((kb / 1024)) MiB PSS in $(printf '%s\n' "${pids[@]}" | sort -u | wc -l) processes"
