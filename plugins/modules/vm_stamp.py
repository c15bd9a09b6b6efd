#!/usr/bin/python
"""Ansible module: a role's proof, kept on the VM, that its work is done for these inputs and still in place."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vm_stamp
short_description: Tell whether a role's work on this host is done for the same inputs and still whole
description:
  - A role that finished records a stamp (state=record) - a digest of its inputs (its variables and its
    own files), the checksums of the files it made and the units it runs. The next run asks first
    (state=check) and skips its work when the stamp is fresh - the same inputs, every file as it was
    made, every unit active - so a warm run costs one task where it cost dozens of look-ups.
  - Anything else makes the stamp stale and the role runs whole, which mends what was wrong - a
    changed setting, a missing or edited file, a stopped service; why is returned in words.
  - Stamps live on the host (by default on the boot disk, C(/var/lib/gpu-rent/stamps)), so a new boot
    disk has none and a new data disk shows as changed files.
  - Recording reports no change - it is bookkeeping about the role's work, which reports its own.
options:
  name: {description: The stamp's name (the role's)., required: true, type: str}
  state: {description: check or record., type: str, default: check, choices: [check, record]}
  inputs: {description: What the work depends on (hashed, never stored or returned)., type: raw, required: true}
  files: {description: Files whose content must stay as the role left it., type: list, elements: path, default: []}
  units: {description: systemd units that must be active., type: list, elements: str, default: []}
  absent: {description: Files that must not exist (a rebuild asked for)., type: list, elements: path, default: []}
  force: {description: Report stale whatever the stamp says (e.g. an update was asked for)., type: bool, default: false}
  dir: {description: Where stamps are kept., type: path, default: /var/lib/gpu-rent/stamps}
"""

RETURN = r"""
fresh: {description: The work is done for these inputs and in place (check)., returned: always, type: bool}
why: {description: Why the stamp is stale, in words; empty when fresh., returned: always, type: str}
"""

import hashlib
import json
import os
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule


def digest(inputs, files, units, absent=()) -> str:
    """The inputs with the lists of what is checked: a role that starts checking one more file is stale once."""
    lists = {"files": sorted(files), "units": sorted(units), "absent": sorted(absent)}
    text = json.dumps({"inputs": inputs, **lists}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sum(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:  # not hashlib.file_digest: Ubuntu 22.04's Python is 3.10
            h = hashlib.sha256()
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
            return h.hexdigest()
    except OSError:
        return None


def judge(recorded, wanted: str, sums: dict, inactive: list, force: bool, present=()) -> str:
    """Why the stamp is stale, or "" when fresh. Pure: the reads are done by the caller."""
    if force:
        return "asked to run whole"
    if not isinstance(recorded, dict) or "digest" not in recorded:
        return "no stamp of an earlier run"
    if recorded["digest"] != wanted:
        return "its inputs or the role changed"
    kept = recorded.get("files") or {}
    for path in sorted(kept):
        if sums.get(path) is None:
            return f"{path} is missing"
        if sums[path] != kept[path]:
            return f"{path} changed"
    if inactive:
        return f"{', '.join(inactive)} not active"
    if present:
        return f"{', '.join(present)} exists"
    return ""


def inactive_units(module: AnsibleModule, units: list) -> list:
    if not units:
        return []
    systemctl = module.get_bin_path("systemctl", required=True)
    states = subprocess.run([systemctl, "is-active", *units], capture_output=True, text=True).stdout.split()
    states += ["unknown"] * (len(units) - len(states))  # a systemctl that said less than asked
    return [unit for unit, state in zip(units, states[: len(units)], strict=True) if state != "active"]


def read(path: str):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write(path: str, record: dict) -> None:
    """Atomically, root only: a run cut short leaves the old stamp or none, never half of one."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".stamp.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(required=True),
            state=dict(default="check", choices=["check", "record"]),
            inputs=dict(type="raw", required=True, no_log=True),
            files=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="str", default=[]),
            absent=dict(type="list", elements="path", default=[]),
            force=dict(type="bool", default=False),
            dir=dict(type="path", default="/var/lib/gpu-rent/stamps"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.join(p["dir"], p["name"] + ".json")
    wanted = digest(p["inputs"], p["files"], p["units"], p["absent"])
    if p["state"] == "record":
        if not module.check_mode:
            write(path, {"digest": wanted, "files": {f: file_sum(f) for f in p["files"]}})
        module.exit_json(changed=False, fresh=True, why="")
    recorded = read(path)
    kept = recorded.get("files") if isinstance(recorded, dict) and isinstance(recorded.get("files"), dict) else {}
    present = [f for f in p["absent"] if os.path.lexists(f)]
    sums = {f: file_sum(f) for f in kept}
    why = judge(recorded, wanted, sums, inactive_units(module, p["units"]), p["force"], present)
    module.exit_json(changed=False, fresh=not why, why=why)


if __name__ == "__main__":
    main()
