#!/usr/bin/python
"""Ansible module: what the bootstrap role checks on the VM - GPU, driver, free space - read in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
module: bootstrap_probe
short_description: Ask nvidia-smi for the GPUs, read the kernel driver's version and measure free space, at once
description:
  - Runs C(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader) (rc 127, the shell's "command
    not found", when there is no nvidia-smi), reads C(/proc/driver/nvidia/version) when nvidia-smi did not
    answer, and runs C(df --output=avail,target -B1) on I(disk_paths).
  - It only reads. Three tasks of about 0.25 s each over SSH (a command, a slurp, a command) were three
    round trips of every up; the role judges what is returned as it judged theirs.
  - Fails with df's own words when df fails (a path that does not exist), as the role's df task did.
options:
  disk_paths: {description: Paths whose filesystems are measured., required: true, type: list, elements: path}
  stamp:
    description: The calling role's stamp (vm_stamp's options, as roles/vm_stamp/tasks/spec.yml makes them),
      checked in this round trip instead of a vm_stamp task of its own.
    type: dict
"""

RETURN = r"""
nvidia_smi: {description: "nvidia-smi's rc, stdout_lines and stderr_lines.", returned: always, type: dict}
kernel_driver: {description: "/proc/driver/nvidia/version's text, or null (nvidia-smi answered, or no driver).",
                returned: always, type: str}
df_lines: {description: "df's output lines, the header first.", returned: always, type: list}
stamp: {description: "vm_stamp's answer for I(stamp) - fresh, why.", returned: with stamp, type: dict}
"""

import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_stamp import STAMP_OPTIONS, checked
except ImportError:
    from ansible.module_utils.gpu_rent_stamp import STAMP_OPTIONS, checked

# Module level: the action plugin of the same name (plugins/action/gpu_rent_light.py) validates with it too.
ARGUMENT_SPEC = {
    "disk_paths": {"type": "list", "elements": "path", "required": True},
    "stamp": {"type": "dict", "options": STAMP_OPTIONS},
}

SMI = ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"]


def run(argv: list[str]) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return {"rc": 1, "stdout_lines": [], "stderr_lines": [str(e)]}
    return {"rc": done.returncode, "stdout_lines": done.stdout.splitlines(), "stderr_lines": done.stderr.splitlines()}


def nvidia_smi() -> dict:
    if shutil.which("nvidia-smi") is None:
        return {"rc": 127, "stdout_lines": [], "stderr_lines": []}
    return run(SMI)


def kernel_driver(path: str = "/proc/driver/nvidia/version") -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    smi = nvidia_smi()
    df = run(["df", "--output=avail,target", "-B1", "--", *module.params["disk_paths"]])
    if df["rc"] != 0:
        module.fail_json(msg=" ".join(df["stderr_lines"]) or f"df failed (exit code {df['rc']})", rc=df["rc"])
    module.exit_json(
        changed=False,
        nvidia_smi=smi,
        kernel_driver=kernel_driver() if smi["rc"] != 0 else None,
        df_lines=df["stdout_lines"],
        **checked(module),
    )


if __name__ == "__main__":
    main()
