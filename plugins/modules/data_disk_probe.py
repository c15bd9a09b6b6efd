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
options:
  link: {description: The disk's link in /dev/disk/by-id., required: true, type: path}
  wait_seconds: {description: How long to wait for the link., type: int, default: 60}
  missing_msg: {description: The failure's words when the link never appears., type: str,
                default: the disk is not attached}
  mount_point: {description: Where the data volume is mounted., required: true, type: path}
  marker: {description: The marker file gpu-rent writes at the top of its filesystem., required: true, type: str}
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
"""

import json
import os
import stat
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule


def run(argv: list) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def must(module: AnsibleModule, argv: list) -> str:
    done = run(argv)
    if done.returncode != 0:
        module.fail_json(msg=f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}", rc=done.returncode)
    return done.stdout


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            link=dict(type="path", required=True),
            wait_seconds=dict(type="int", default=60),
            missing_msg=dict(default="the disk is not attached"),
            mount_point=dict(type="path", required=True),
            marker=dict(required=True),
        ),
        supports_check_mode=True,
    )
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
    )


if __name__ == "__main__":
    main()
