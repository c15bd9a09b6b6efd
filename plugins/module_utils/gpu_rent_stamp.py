"""A VM role's stamp (plugins/modules/vm_stamp.py): shared by the modules that check one in their own round trip.

vm_stamp checks and records stamps; a probe that a role runs on every run anyway (bootstrap_probe,
swarmui_probe) takes the role's stamp too and checks it here, which spares the warm run a round trip.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile

# The options of a stamp, as vm_stamp takes them and a probe's `stamp` option takes them as suboptions.
STAMP_OPTIONS = dict(
    name=dict(required=True),
    # roles/vm_stamp hands a digest of the variables (vm_stamp_digest), never their values
    inputs=dict(type="raw", required=True, no_log=False),
    files=dict(type="list", elements="path", default=[]),
    units=dict(type="list", elements="str", default=[]),
    absent=dict(type="list", elements="path", default=[]),
    force=dict(type="bool", default=False),
    dir=dict(type="path", default="/var/lib/gpu-rent/stamps"),
)


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


def inactive_units(systemctl: str, units: list) -> list:
    if not units:
        return []
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


def stamp_path(spec: dict) -> str:
    return os.path.join(spec["dir"], spec["name"] + ".json")


def check(spec: dict, systemctl) -> dict:
    """{fresh, why} for a stamp's options; systemctl: the path of systemctl (a callable giving it, asked only
    when there are units)."""
    wanted = digest(spec["inputs"], spec["files"], spec["units"], spec["absent"])
    recorded = read(stamp_path(spec))
    kept = recorded.get("files") if isinstance(recorded, dict) and isinstance(recorded.get("files"), dict) else {}
    present = [f for f in spec["absent"] if os.path.lexists(f)]
    sums = {f: file_sum(f) for f in kept}
    inactive = inactive_units(systemctl(), spec["units"]) if spec["units"] else []
    why = judge(recorded, wanted, sums, inactive, spec["force"], present)
    return {"fresh": not why, "why": why}


def record(spec: dict) -> None:
    wanted = digest(spec["inputs"], spec["files"], spec["units"], spec["absent"])
    write(stamp_path(spec), {"digest": wanted, "files": {f: file_sum(f) for f in spec["files"]}})


def checked(module) -> dict:
    """A probe's answer for its `stamp` option: {"stamp": {fresh, why}}, or {} when the caller gave none."""
    spec = module.params.get("stamp")
    return {"stamp": check(spec, lambda: module.get_bin_path("systemctl", required=True))} if spec else {}
