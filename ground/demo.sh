#!/usr/bin/env bash
# The main job on the test ground (make demo): rent in .ground/project, reach SwarmUI (the stand-in)
# through the tunnel, look, stop, and prove nothing billable is left. Times itself.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU_RENT=$PWD/.venv/bin/gpu-rent
PY=$PWD/.venv/bin/python
cd .ground/project
start=$(date +%s)
step() { printf '\n\033[1m== %s (+%ss)\033[0m\n' "$1" "$(( $(date +%s) - start ))"; }

step "gpu-rent doctor"
"$GPU_RENT" doctor
step "gpu-rent up --yes"
"$GPU_RENT" up --yes
up_done=$(( $(date +%s) - start ))
url=$("$GPU_RENT" status --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["tunnel"]["url"])')
step "SwarmUI (the ground's stand-in) through the tunnel at $url"
api() { curl -sS --fail --max-time 10 -X POST -H 'Content-Type: application/json' -d "$2" "$url/API/$1"; }
session=$(api GetNewSession '{}')
echo "GetNewSession: $session"
sid=$(printf '%s' "$session" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["session_id"])')
echo "GetCurrentStatus: $(api GetCurrentStatus "{\"session_id\": \"$sid\"}")"
step "gpu-rent status"
"$GPU_RENT" status
step "gpu-rent stop"
"$GPU_RENT" stop
step "gpu-rent status"
"$GPU_RENT" status
# nothing billable left: no server, no floating IP, no leftover; the two volumes stay (that is the point)
"$GPU_RENT" status --json | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
assert s["phase"] == "idle" and s["server"] is None and s["floating_ip"] is None, s
assert s["leftovers"] == [], s["leftovers"]
print("nothing billable left: no server, no floating IP, no leftover; kept:",
      ", ".join(f"{v['"'"'name'"'"']} ({v['"'"'size_gb'"'"']} GB)" for v in s["volumes"]))'
printf '\n\033[1mdemo done in %ss (up to ready_tunneled: %ss)\033[0m\n' "$(( $(date +%s) - start ))" "$up_done"
