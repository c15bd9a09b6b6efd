"""The user data of a create from the image: cloud-init installs the idle-killer at the server's first boot.

A boot volume made from a stock image holds nothing of gpu-rent's until bootstrap's arm over SSH, and a laptop lost
before that would leave a server nothing deletes. So the create that makes it carries, as its user data, an
installer that cloud-init runs once per instance in its final stage: the on_vm package and the three units, the
idle_killer role's own files (roles/idle_killer/tasks/first_boot.yml renders them on the controller), a config that
names no server and holds no credential (`idle_killer first-boot`: written only where none is), then the timer and
the last breath started. The first tick learns its server from the metadata service and takes the credential the
create carries (gpu_rent/on_vm/handoff.py), as a kept boot volume's killer does. The arm later writes its own config
over it. No secret passes here: the credential is handed through the server's metadata.

SIZE_NOTES: Nova refuses user data longer than 65535 bytes after base64 (the create's schema, maxLength 65535 in
nova/api/openstack/compute/schemas/servers.py; docs.openstack.org/nova/latest/user/metadata.html, "User data").
The package is ~140 KB of text: as a #cloud-config with write_files, gzip brings it to ~44 KB, ~59 KB in base64,
a margin of 10 % that a few more features of the killer would spend. xz packs the same files to ~38 KB, so the
installer carries them as base64 of xz-compressed JSON inside a Python script, and the whole script is gzipped
(cloud-init decompresses gzip user data itself, and base64 text gzips back to about its bytes): ~52 KB after
Nova's base64. Python, not `#!/bin/sh` with xz(1): xz-utils is not in every image (Debian's is Priority standard,
and a minbase, the test ground's hosts, lacks it), while python3 and its lzma module are wherever cloud-init runs,
and the killer needs python3 anyway. tests/unit/test_first_boot.py measures the real files against LIMIT.

Upstream, as relied on: cloud-init's user-data formats (cloudinit.readthedocs.io, "User-data formats": gzip
compressed content is uncompressed first; a script beginning with #! is run at the rc.local-like level of the first
boot, i.e. scripts_user in the final stage, once per instance).
"""

from __future__ import annotations

import base64
import gzip
import json

LIMIT = 65535  # Nova: the create's user_data, base64 (SIZE_NOTES)

# fresh_server's first_boot option, as roles/idle_killer/tasks/first_boot.yml sets idle_killer_first_boot
FIRST_BOOT_OPTIONS = dict(
    program_dir=dict(required=True),
    files=dict(type="dict", required=True),
    config_file=dict(required=True),
    config=dict(required=True),
    start=dict(type="list", elements="str", required=True),
)

# Python 3.10 up, as the killer itself (zip strict); the standard library only. Files are replaced whole, as the
# arm's copy does: the arm may run beside it (sshd is up before cloud-init's final stage), and writes the very same
# bytes. --no-block: the boot's last stage never waits on a start job (one ordered after that stage would wait on
# it in turn).
INSTALLER = """#!/usr/bin/python3
# gpu-rent: the idle-killer, installed at this server's first boot from the image (cloud-init user data), so that it
# deletes the server when nothing works on it, whatever becomes of the laptop (docs/idle-killer.md).
import base64
import json
import lzma
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else ""  # a folder in place of / (tests/unit/test_first_boot.py)
PAYLOAD = "{payload}"


def put(path, data):
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".gpu-rent-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


given = json.loads(lzma.decompress(base64.b64decode(PAYLOAD)).decode())
for path, text in sorted(given["files"].items()):
    put(ROOT + path, text.encode())
env = dict(os.environ, PYTHONPATH=ROOT + given["program_dir"])
argv = [sys.executable, "-m", "on_vm.idle_killer", "first-boot", "--config", ROOT + given["config_file"]]
subprocess.run(argv, input=given["config"].encode(), env=env, cwd="/", check=True)
subprocess.run(["systemctl", "daemon-reload"], check=True)
subprocess.run(["systemctl", "enable", "--now", "--no-block"] + given["start"], check=True)
print("gpu-rent: idle-killer installed and started; it takes its server's credential from the metadata service")
"""


def installer(spec: dict) -> str:
    """The script cloud-init runs: INSTALLER with the files, the config and the units packed in (SIZE_NOTES)."""
    config = spec["config"] if spec["config"].endswith("\n") else spec["config"] + "\n"  # as the arm writes it
    packed = {"program_dir": spec["program_dir"], "files": spec["files"], "config_file": spec["config_file"],
              "config": config, "start": list(spec["start"])}  # fmt: skip
    text = json.dumps(packed, sort_keys=True, ensure_ascii=False).encode()
    import lzma  # here: a laptop's Python built without xz (_lzma) still makes every other create

    payload = base64.b64encode(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME)).decode()
    return INSTALLER.replace("{payload}", payload)


def user_data(spec: dict) -> str:
    """The create's user_data as Nova takes it: the installer gzipped (mtime 0: the same files, the same bytes),
    then base64."""
    return base64.b64encode(gzip.compress(installer(spec).encode(), compresslevel=9, mtime=0)).decode()


def too_big(encoded: str) -> str | None:
    """Why Nova would refuse this user data, in one line; None when it fits."""
    if len(encoded) <= LIMIT:
        return None
    return (f"the first boot's user data is {len(encoded)} bytes after base64, over Nova's {LIMIT}: the idle-killer's "
            "package outgrew it (plugins/module_utils/gpu_rent_first_boot.py SIZE_NOTES)")  # fmt: skip
