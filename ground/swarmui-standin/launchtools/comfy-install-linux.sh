#!/usr/bin/env bash
# Stand-in for SwarmUI's comfy-install-linux.sh: lays out dlbackend/ComfyUI as
# the real script does (git clone + venv + torch), without downloading.
# Usage: comfy-install-linux.sh nv|amd
set -e
cd "$(dirname "$0")/.." || exit 1
gpu=${1:-nv}
mkdir -p dlbackend/ComfyUI/venv/bin dlbackend/ComfyUI/custom_nodes dlbackend/ComfyUI/models
cat > dlbackend/ComfyUI/main.py <<'PY'
# ComfyUI stand-in entry point (the SwarmUI stand-in never runs it)
PY
echo "$gpu" > dlbackend/ComfyUI/venv/.gpu-kind
echo "ComfyUI installed for $gpu"
