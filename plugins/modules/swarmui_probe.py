#!/usr/bin/python
"""Ansible module: what the swarmui role reads on the VM before it writes, read in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
module: swarmui_probe
short_description: Read SwarmUI's project file, settings, backends and the GPUs at once
description:
  - Returns the text of C(src/SwarmUI.csproj), C(Data/Settings.fds) and C(Data/Backends.fds) under I(dir)
    (null where a file is absent), the mode of C(Data), and nvidia-smi's index and memory.total of each GPU.
  - It only reads. The swarmui role's own tasks (file, template, lineinfile, blockinfile) still write, and
    run where what was read says they would change something - six reads and writes of about 0.35 s each
    over SSH on every warm run were the role's largest share of a warm up.
options:
  dir: {description: SwarmUI's folder., required: true, type: path}
  stamp:
    description: The calling role's stamp (vm_stamp's options, as roles/vm_stamp/tasks/spec.yml makes them),
      checked in this round trip instead of a vm_stamp task of its own.
    type: dict
"""

RETURN = r"""
csproj: {description: src/SwarmUI.csproj's text, or null., returned: always, type: str}
settings: {description: Data/Settings.fds's text, or null., returned: always, type: str}
settings_lines: {description: "Its lines split as lineinfile splits them (at \\n, each with its newline).",
                 returned: always, type: list}
backends: {description: Data/Backends.fds's text, or null., returned: always, type: str}
data_mode: {description: "Data's permission bits as four octal digits (0755), or null when it is no folder.",
            returned: always, type: str}
gpus:
  description: "nvidia-smi --query-gpu=index,memory.total (csv, no header, no units): rc (127 without nvidia-smi),
    stdout_lines."
  returned: always
  type: dict
stamp: {description: "vm_stamp's answer for I(stamp) - fresh, why.", returned: with stamp, type: dict}
"""

import os
import re
import shutil
import stat
import subprocess

from ansible.module_utils.basic import AnsibleModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_stamp import STAMP_OPTIONS, checked
except ImportError:
    from ansible.module_utils.gpu_rent_stamp import STAMP_OPTIONS, checked

# Module level: the action plugin of the same name (plugins/action/gpu_rent_light.py) validates with it too.
ARGUMENT_SPEC = {"dir": {"type": "path", "required": True}, "stamp": {"type": "dict", "options": STAMP_OPTIONS}}


def text(path: str) -> str | None:
    """The file's text; None where it cannot be read (absent, a folder), as the role's slurps took it."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()
    except OSError:
        return None


def lines(content: str | None) -> list[str]:
    """Split at \\n only, each line with its newline: as lineinfile reads a file (str.splitlines also
    splits at \\r, \\f and more)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", content or "")


def folder_mode(path: str) -> str | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{stat.S_IMODE(st.st_mode):04o}" if stat.S_ISDIR(st.st_mode) else None


def gpus() -> dict:
    """As the role's command did: `command -v nvidia-smi || exit 127`, else its rows."""
    if shutil.which("nvidia-smi") is None:
        return {"rc": 127, "stdout_lines": []}
    argv = ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return {"rc": 1, "stdout_lines": [], "stderr": str(e)}
    return {"rc": done.returncode, "stdout_lines": done.stdout.splitlines(), "stderr": done.stderr}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    top = module.params["dir"]
    settings = text(os.path.join(top, "Data", "Settings.fds"))
    module.exit_json(
        changed=False,
        csproj=text(os.path.join(top, "src", "SwarmUI.csproj")),
        settings=settings,
        settings_lines=lines(settings),
        backends=text(os.path.join(top, "Data", "Backends.fds")),
        data_mode=folder_mode(os.path.join(top, "Data")),
        gpus=gpus(),
        **checked(module),
    )


if __name__ == "__main__":
    main()
