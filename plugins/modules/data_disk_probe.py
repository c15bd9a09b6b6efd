#!/usr/bin/python
"""Ansible module: what the data disk holds and where it is mounted, read in one task on the VM."""

from __future__ import annotations

DOCUMENTATION = r"""
module: data_disk_probe
short_description: Find the data disk by its link and read what it holds and where it is mounted
description:
  - Waits for the disk's link (C(/dev/disk/by-id/virtio-...)), resolves it, and when it names a block
    device reads the disk the way the data_volume role decides on it - C(blkid -p) (the disk, not a
    cache), C(wipefs), C(lsblk), the device number, the mount table (C(findmnt)), the marker at the
    mount point and, when the disk is mounted there, its top level.
  - It only reads. Every one of these reads stays on every run (they guard the data - nothing is
    formatted that holds anything); they were ten tasks of about 0.2 s each over SSH, now one.
  - The role judges the answers (roles/data_volume/tasks/filesystem.yml); this module decides nothing.
  - It also reads the fstab lines of the mount point and, for ext4 and ext3, the filesystem's size
    against the disk's, so that a warm run spares the mount and the grow their round trips when fstab
    already says what the mount task would write and the filesystem already fills its disk.
options:
  link: {description: The disk's link in /dev/disk/by-id., required: true, type: path}
  wait_seconds: {description: How long to wait for the link., type: int, default: 60}
  missing_msg: {description: The failure's words when the link never appears., type: str,
                default: the disk is not attached}
  mount_point: {description: Where the data volume is mounted., required: true, type: path}
  marker: {description: The marker file gpu-rent writes at the top of its filesystem., required: true, type: str}
  stamp:
    description: The boot-time grow's stamp (vm_stamp's options, as roles/vm_stamp/tasks/spec.yml makes them),
      checked in this round trip; its inputs are taken together with the UUID blkid finds (the unit names the
      filesystem), so it is checked only when blkid finds one.
    type: dict
  binds:
    description: The bind mounts that must come from this filesystem - its directory I(src) on I(bind_dir)/I(dest)
      - each with its fstab line (C(mount_point/src target none bind_opts)), as
      roles/data_volume/tasks/bind_mounts.yml checks them.
    type: list
    elements: dict
    default: []
  bind_dir: {description: The directory the binds' I(dest) are in., type: path, default: /}
  bind_opts: {description: The options of each bind's fstab line., type: str, default: bind}
"""

RETURN = r"""
device: {description: The device the link names (the link itself when it is no link)., returned: always, type: str}
is_block: {description: Whether that is a block device; nothing else is read when it is not., returned: always,
           type: bool}
blkid: {description: "blkid -p -o export: rc (2 is nothing found), stdout_lines, stderr.", returned: when is_block,
        type: dict}
found: {description: "blkid's KEY=value lines as a dict (DEVNAME left out).", returned: when is_block, type: dict}
signatures: {description: "wipefs's TYPE OFFSET lines.", returned: when is_block, type: list}
partitions: {description: Partitions lsblk lists on the disk (empty where lsblk cannot see sysfs).,
             returned: when is_block, type: list}
mounted_at: {description: Where the whole filesystem of this disk is mounted (FSROOT /)., returned: when is_block,
             type: list}
mount_point_source: {description: What is mounted at mount_point, if anything., returned: when is_block, type: str}
marker_exists: {description: Whether mount_point/marker exists (on whatever is mounted there)., returned: when is_block,
                type: bool}
top: {description: The top level of the disk when it is mounted at mount_point, else null., returned: when is_block,
      type: list}
fstab: {description: "The fields of each /etc/fstab line whose mount point is mount_point, in order.",
        returned: when is_block, type: list}
disk_bytes: {description: The disk's size., returned: when is_block, type: int}
stamp: {description: "vm_stamp's answer for I(stamp) with the UUID found - fresh, why.",
        returned: with stamp and a UUID, type: dict}
binds_in_place: {description: "Every bind is mounted from this filesystem's own directory and in fstab (the mount
                 point's last mount counts, as findmnt's last line).", returned: when is_block, type: bool}
fs_bytes: {description: "The ext4 or ext3 filesystem's size (dumpe2fs -h: block count times block size); null for
           any other filesystem or when dumpe2fs cannot say.", returned: when is_block, type: int}
"""

import json
import os
import stat
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_stamp import STAMP_OPTIONS, check
except ImportError:
    from ansible.module_utils.gpu_rent_stamp import STAMP_OPTIONS, check

# Module level: the action plugin of the same name (plugins/action/gpu_rent_light.py) validates with it too.
ARGUMENT_SPEC = dict(
    link=dict(type="path", required=True),
    wait_seconds=dict(type="int", default=60),
    missing_msg=dict(default="the disk is not attached"),
    mount_point=dict(type="path", required=True),
    marker=dict(required=True),
    stamp=dict(type="dict", options=STAMP_OPTIONS),
    binds=dict(type="list", elements="dict", default=[]),
    bind_dir=dict(type="path", default="/"),
    bind_opts=dict(default="bind"),
)


def run(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def must(module: AnsibleModule, argv: list) -> str:
    done = run(argv)
    if done.returncode != 0:
        module.fail_json(msg=f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}", rc=done.returncode)
    return done.stdout


def fstab_lines(text: str, mount_point: str) -> list:
    """The fields of the lines naming mount_point, split as ansible.posix.mount splits them (a comment cut off)."""
    lines = (line.split("#")[0].split() for line in text.splitlines())
    return [fields for fields in lines if len(fields) > 1 and fields[1] == mount_point]


def ext_bytes(dumpe2fs_header: str) -> int | None:
    """Block count times block size from dumpe2fs -h, or None when either is missing."""
    found = dict(line.split(":", 1) for line in dumpe2fs_header.splitlines() if ":" in line)
    try:
        return int(found["Block count"]) * int(found["Block size"])
    except (KeyError, ValueError):
        return None


def binds_in_place(mounts: list, fstab: str, devno: str, mount_point: str, binds: list, opts: str) -> bool:
    """Whether the data volume (devno, MAJ:MIN) is on top at the mount point, each bind's target shows it at
    /src on top, and fstab has each bind's line (bind_mounts.yml's shell check, which undoes and makes binds
    when this says no). A filesystem stacked over the volume or a bind of another disk's folder is not in
    place, whatever its path says. binds: {src, target}."""

    def on_top(target: str) -> dict:
        return next((m for m in reversed(mounts) if m.get("target") == target), {})

    volume = on_top(mount_point)
    if volume.get("maj:min") != devno or volume.get("fsroot") != "/":
        return not binds
    lines = [line.split() for line in fstab.splitlines()]
    for bind in binds:
        shown = on_top(bind["target"])
        if shown.get("maj:min") != devno or shown.get("fsroot") != "/" + bind["src"]:
            return False
        wanted = [f"{mount_point}/{bind['src']}", bind["target"], "none", opts]
        if not any(fields[:4] == wanted for fields in lines):
            return False
    return True


def disk_size(device: str) -> int:
    with open(device, "rb") as disk:
        return disk.seek(0, os.SEEK_END)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    link = p["link"]
    deadline = time.monotonic() + p["wait_seconds"]
    while not os.path.exists(link):  # as wait_for path= (roles/data_volume/tasks/find_disk.yml said it so)
        if time.monotonic() > deadline:
            module.fail_json(msg=p["missing_msg"])
        time.sleep(0.2)
    device = os.path.realpath(link) if os.path.islink(link) else link
    is_block = stat.S_ISBLK(os.stat(device).st_mode)
    if not is_block:
        module.exit_json(changed=False, device=device, is_block=False)

    blkid = run(["blkid", "-p", "-o", "export", link])  # rc 2 is "nothing found"; the role judges the rest
    found = dict(
        line.split("=", 1) for line in blkid.stdout.splitlines() if "=" in line and not line.startswith("DEVNAME=")
    )
    signatures = [line.strip() for line in must(module, ["wipefs", "--noheadings", "--output", "TYPE,OFFSET", link])
                  .splitlines() if line.strip()]  # fmt: skip
    # lsblk needs the device in sysfs, which a container hides (it then fails and says nothing); a
    # partitioned disk also carries a partition table signature that blkid -p and wipefs both report.
    lsblk = run(["lsblk", "--noheadings", "--raw", "--output", "NAME", device])
    partitions = lsblk.stdout.splitlines()[1:] if lsblk.returncode == 0 else []
    devno = must(module, ["mountpoint", "-x", device]).strip()
    mounts = json.loads(must(module, ["findmnt", "--json", "--list", "--output", "TARGET,SOURCE,MAJ:MIN,FSROOT"]))
    mounts = mounts.get("filesystems", [])
    mounted_at = [m["target"] for m in mounts if m.get("maj:min") == devno and m.get("fsroot") == "/"]
    sources = [m.get("source") or "" for m in mounts if m.get("target") == p["mount_point"]]
    top = sorted(os.listdir(p["mount_point"])) if p["mount_point"] in mounted_at else None
    try:
        with open("/etc/fstab", encoding="utf-8") as handle:
            fstab_text = handle.read()
    except FileNotFoundError:
        fstab_text = ""
    binds = [{"src": b["src"], "target": os.path.join(p["bind_dir"], b["dest"])} for b in p["binds"]]
    said = {}
    if p["stamp"] and found.get("UUID"):
        spec = {**p["stamp"], "inputs": {"role": p["stamp"]["inputs"], "uuid": found["UUID"]}}
        said["stamp"] = check(spec, lambda: module.get_bin_path("systemctl", required=True))
    fs_bytes = None
    if found.get("TYPE") in ("ext4", "ext3"):
        header = run(["dumpe2fs", "-h", device])  # missing e2fsprogs, or damage: None, and the role grows as before
        fs_bytes = ext_bytes(header.stdout) if header.returncode == 0 else None
    module.exit_json(
        changed=False,
        device=device,
        is_block=True,
        blkid=dict(rc=blkid.returncode, stdout_lines=blkid.stdout.splitlines(), stderr=blkid.stderr),
        found=found,
        signatures=signatures,
        partitions=partitions,
        mounted_at=mounted_at,
        mount_point_source=sources[-1] if sources else "",
        marker_exists=os.path.lexists(os.path.join(p["mount_point"], p["marker"])),
        top=top,
        fstab=fstab_lines(fstab_text, p["mount_point"]),
        disk_bytes=disk_size(device),
        fs_bytes=fs_bytes,
        binds_in_place=binds_in_place(mounts, fstab_text, devno, p["mount_point"], binds, p["bind_opts"]),
        **said,
    )


if __name__ == "__main__":
    main()
