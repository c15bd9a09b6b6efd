"""Which of SwarmUI's backends are gpu-rent's own, written once for the two programs that ask.

The idle-killer (idle_decision.our_backends) and the swarmui role's readiness check (swarmui_ready.ours)
must agree: a backend readiness does not see as ours makes the role add a second one on its GPU, and
one the killer does not see as ours is "no backend of ours running". Standard library only, importing
nothing: each role copies it to the VM within its on_vm package.
"""

from __future__ import annotations

# gpu-rent's own backends: ComfyUI self-started from this script (roles/swarmui writes it so in
# Data/Backends.fds, one backend per GPU; its swarmui_comfy_main).
OUR_BACKEND_TYPE = "comfyui_selfstart"
OUR_START_SCRIPT = "dlbackend/ComfyUI/main.py"
# SwarmUI trims these off StartScript before it launches it (ComfyUISelfStartBackend.Init:
# `Settings.StartScript.Trim(' ', '"', '\'', '\n', '\r', '\t')`).
UPSTREAM_TRIMMED = " \"'\n\r\t"


def start_script_is_ours(script: object, start_script: str = OUR_START_SCRIPT) -> bool:
    """Whether a StartScript setting launches our main.py: the same path once trimmed as upstream trims it,
    relative to SwarmUI's folder (as the role writes it) or absolute (`/opt/swarmui/dlbackend/ComfyUI/main.py`,
    which upstream runs as it is). A backslash counts as a slash: a Backends.fds carried over from Windows."""
    path = str(script or "").strip(UPSTREAM_TRIMMED).replace("\\", "/")
    return path == start_script or path.endswith("/" + start_script)


def is_ours(entry: object, start_script: str = OUR_START_SCRIPT) -> bool:
    """Whether one ListBackends entry (BackendAPI.BackendToNet's shape) is one of gpu-rent's backends,
    enabled or not: a self-start ComfyUI whose StartScript is ours."""
    if not isinstance(entry, dict) or entry.get("type") != OUR_BACKEND_TYPE:
        return False
    settings = entry.get("settings") if isinstance(entry.get("settings"), dict) else {}
    return start_script_is_ours(settings.get("StartScript"), start_script)
