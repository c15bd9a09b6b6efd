"""The data_volume role on a real ground host: mkfs only on an empty disk, never on anything else (SPEC §6).

Every case runs the real playbook (playbooks/data_volume.yml) with ansible-playbook over SSH against one
rented host whose data volume is a real loop device. Between cases the host is put back to a blank slate
(mounts gone, fstab as it came, disk wiped), which is much faster than renting a host per case.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.groundkit import HOST_VARS, REPO, Cloud, ssh, wait_for_ssh

pytestmark = pytest.mark.ground

BIN = Path(sys.executable).parent
PLAYBOOK = REPO / "playbooks" / "data_volume.yml"
MOUNT = "/mnt/swarm_data"
MARKER = f"{MOUNT}/.gpu-rent-ready"
SWARMUI = "/opt/swarmui"
BINDS = {
    "Models": "Models",
    "Output": "Output",
    "Data": "Data",
    "dlbackend": "dlbackend",
    "Extensions": "src/Extensions",
    "DLNodes": "src/BuiltinExtensions/ComfyUIBackend/DLNodes",
    "CustomWorkflows": "src/BuiltinExtensions/ComfyUIBackend/CustomWorkflows",
}
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Host:
    address: str
    volume_id: str

    @property
    def by_id(self) -> str:
        return f"/dev/disk/by-id/virtio-{self.volume_id[:20]}"

    def sh(self, command: str, timeout: float = 120) -> str:
        result = ssh(self.address, f"set -e\n{command}", timeout=timeout)
        assert result.returncode == 0, f"{command!r} on the host failed:\n{result.stderr}"
        return result.stdout

    def sha256(self, path: str) -> str:
        return self.sh(f"sha256sum {path}").split()[0]

    def mounted(self, path: str) -> bool:
        return ssh(self.address, f"mountpoint -q {path}").returncode == 0


@pytest.fixture(scope="module")
def host(member_conn, net):
    """One host with a 1 GiB data volume. m1.small: the role needs no GPU, and GPUs are scarce on the shared ground."""
    cloud = Cloud(member_conn)
    try:
        boot, data = cloud.volume(10, image=True), cloud.volume(1)
        server = cloud.server(net, boot, data, flavor="m1.small", key_name=cloud.keypair())
        address = cloud.floating_ip(server)
        wait_for_ssh(address)
        h = Host(address, data.id)
        h.sh("cp /etc/fstab /root/fstab.ground")
        yield h
    finally:
        cloud.close()


@pytest.fixture
def blank(host):
    """The host as a fresh VM sees it: nothing mounted, fstab as shipped, no SwarmUI tree, a zeroed disk."""
    host.sh(
        f"findmnt -rn -o TARGET | grep -E '^({SWARMUI}|{MOUNT})(/|$)' | sort -r | xargs -r umount\n"
        "cp /root/fstab.ground /etc/fstab\n"
        f"rm -rf {SWARMUI} {MOUNT} /run/blkid\n"
        f"wipefs -a -f -q {host.by_id}\n"
        f"dd if=/dev/zero of={host.by_id} bs=1M count=8 status=none conv=fsync"
    )
    return host


def play(host: Host, tmp_path: Path, **extra_vars) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the real playbook against the host; return the run and its PLAY RECAP counters."""
    inventory = tmp_path / "inventory.yml"
    host_vars = {
        "ansible_host": host.address,
        **HOST_VARS,
        "ansible_python_interpreter": "/usr/bin/python3",
        "data_volume_id": host.volume_id,
        **extra_vars,
    }
    inventory.write_text(yaml.safe_dump({"gpu_rent_vm": {"hosts": {"vm": host_vars}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_RENT_"))}
    # pipelining as in the repository's ansible.cfg: a third of the run time over SSH
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_PIPELINING="1")
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK)],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    recaps = RECAP.findall(result.stdout)
    assert recaps, f"no PLAY RECAP:\n{result.stdout}\n{result.stderr}"
    _, ok, changed, unreachable, failed = recaps[-1]
    return result, {"ok": int(ok), "changed": int(changed), "unreachable": int(unreachable), "failed": int(failed)}


def outcome(stdout: str, task: str) -> str:
    """How the task named went for the host, as the default callback prints it (ok, changed, skipping, ...)."""
    chunk = stdout.split(f"TASK [{task}]", 1)
    assert len(chunk) == 2, f"no task {task!r} in:\n{stdout}"
    found = re.search(r"^(\w+): \[vm\]", chunk[1].split("TASK [", 1)[0], re.M)
    assert found, chunk[1][:500]
    return found.group(1)


def refusal(result: subprocess.CompletedProcess) -> str:
    """The message of the failed task, as printed."""
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("fatal:")]
    assert lines, result.stdout
    return lines[-1]


def assert_untouched(host: Host, disk_sha: str) -> None:
    assert host.sha256(host.by_id) == disk_sha  # not one byte of the disk written
    assert not host.mounted(MOUNT)
    assert "swarm_data" not in host.sh("cat /etc/fstab")


def fs_uuid(host: Host) -> str:
    return host.sh(f"blkid -p -s UUID -o value {host.by_id}").strip()


def test_an_empty_disk_is_formatted_once_and_a_second_run_changes_nothing(blank, tmp_path):
    host = blank
    assert ssh(host.address, f"blkid -p {host.by_id}").returncode == 2  # nothing on it

    first, counts = play(host, tmp_path)
    assert first.returncode == 0, first.stdout
    assert counts["changed"] > 0
    uuid = fs_uuid(host)
    assert host.sh(f"blkid -p -s TYPE -o value {host.by_id}").strip() == "ext4"
    assert host.sh(f"findmnt -n -o SOURCE {MOUNT}").strip() == "/dev/vdb"
    assert host.volume_id in host.sh(f"cat {MARKER}")
    fstab = host.sh("cat /etc/fstab")
    assert re.search(rf"^UUID={uuid}\s+{MOUNT}\s+ext4\s+\S*nofail", fstab, re.M), fstab
    for src, dest in BINDS.items():
        assert re.search(rf"^{MOUNT}/{src}\s+{SWARMUI}/{dest}\s+none\s+bind,nofail,\S+", fstab, re.M), fstab
        assert host.sh(f"findmnt -n -o FSROOT {SWARMUI}/{dest}").strip() == f"/{src}"

    second, counts = play(host, tmp_path)
    assert second.returncode == 0, second.stdout
    assert counts["changed"] == 0, second.stdout
    assert fs_uuid(host) == uuid  # not formatted again
    # warm: the probe proved everything in place, and the tasks that would change nothing were one skip
    assert outcome(second.stdout, "data_volume : Format, mount, grow and bind what is not in place.") == "skipping"
    # A warm run skips the mount task when fstab already says what it writes: an edited line is still put back.
    edited = re.sub(rf"^(UUID={uuid}\s+{MOUNT}\s+ext4\s+)\S+", r"\1defaults", fstab, flags=re.M)
    assert edited != fstab
    host.sh(f"cat > /etc/fstab <<'FSTAB'\n{edited}FSTAB")
    third, counts = play(host, tmp_path)
    assert third.returncode == 0, third.stdout
    assert counts["changed"] > 0, third.stdout
    assert re.search(rf"^UUID={uuid}\s+{MOUNT}\s+ext4\s+\S*nofail", host.sh("cat /etc/fstab"), re.M)


def test_ext4_with_files_and_no_marker_is_refused_and_kept_byte_for_byte(blank, tmp_path):
    host = blank
    host.sh(
        f"mkfs.ext4 -q {host.by_id} && mkdir -p /mnt/user && mount {host.by_id} /mnt/user\n"
        "mkdir /mnt/user/Models && head -c 3M /dev/urandom > /mnt/user/Models/model.safetensors\n"
        "echo mine > /mnt/user/notes.txt && umount /mnt/user"
    )
    disk = host.sha256(host.by_id)

    result, _ = play(host, tmp_path)
    message = refusal(result)
    for named in (host.by_id, "/dev/vdb", "TYPE=ext4", "without the marker", "notes.txt", "neither formatted"):
        assert named in message, message
    assert_untouched(host, disk)
    files = host.sh("mount -o ro /dev/vdb /mnt/user && cat /mnt/user/notes.txt && umount /mnt/user")
    assert files == "mine\n"


def assert_refused_untouched(host, tmp_path, *found: str) -> None:
    """The role stops naming the disk and what it found on it, and the disk is byte for byte as it was."""
    disk = host.sha256(host.by_id)
    result, _ = play(host, tmp_path)
    message = refusal(result)
    for named in (host.by_id, "/dev/vdb", *found):
        assert named in message, message
    assert_untouched(host, disk)


def test_xfs_is_refused_and_kept(blank, tmp_path):
    host = blank
    host.sh(f"mkfs.xfs -q {host.by_id}")
    assert_refused_untouched(host, tmp_path, "a filesystem", "TYPE=xfs")


def test_a_partition_table_is_refused(blank, tmp_path):
    host = blank
    # The hosts carry no sfdisk or parted; an MBR with one Linux partition is 16 bytes and a signature.
    host.sh(
        "python3 - <<'EOF'\n"
        "import struct\n"
        "mbr = bytearray(512)\n"
        "mbr[446:462] = struct.pack('<B3sB3sII', 0, b'\\0\\2\\0', 0x83, b'\\xff\\xff\\xff', 2048, 1_000_000)\n"
        "mbr[510:512] = b'\\x55\\xaa'\n"
        f"with open('{host.by_id}', 'r+b') as disk:\n"
        "    disk.write(mbr)\n"
        "EOF"
    )
    assert host.sh(f"blkid -p -s PTTYPE -o value {host.by_id}").strip() == "dos"
    assert_refused_untouched(host, tmp_path, "a partition table", "PTTYPE=dos")


def test_a_disk_with_the_marker_is_mounted_on_a_fresh_vm_not_formatted(blank, tmp_path):
    host = blank
    first, _ = play(host, tmp_path)
    assert first.returncode == 0, first.stdout
    uuid = fs_uuid(host)
    host.sh(f"head -c 2M /dev/urandom > {SWARMUI}/Models/kept.bin")
    kept = host.sha256(f"{MOUNT}/Models/kept.bin")  # written through the bind, found on the volume
    # A new VM: nothing mounted, an fstab that knows nothing of the volume.
    host.sh(
        f"findmnt -rn -o TARGET | grep -E '^({SWARMUI}|{MOUNT})(/|$)' | sort -r | xargs -r umount\n"
        "cp /root/fstab.ground /etc/fstab"
    )
    assert not host.mounted(MOUNT)

    again, _ = play(host, tmp_path)
    assert again.returncode == 0, again.stdout
    assert fs_uuid(host) == uuid
    assert host.mounted(MOUNT)
    assert host.sha256(f"{SWARMUI}/Models/kept.bin") == kept
    assert "Format the empty disk" not in _task_lines_changed(again.stdout)


def _task_lines_changed(stdout: str) -> str:
    """The names of the tasks that reported a change, one a line."""
    changed, task = [], ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            changed.append(task)
    return "\n".join(changed)


def test_files_of_an_earlier_swarmui_clone_are_carried_onto_the_volume_never_over_it(blank, tmp_path):
    host = blank
    first, _ = play(host, tmp_path)
    assert first.returncode == 0, first.stdout
    host.sh(f"echo from-volume > {MOUNT}/Data/Settings.fds")
    # The same volume on a new VM whose boot disk already holds a SwarmUI clone with files in bind targets.
    host.sh(
        f"findmnt -rn -o TARGET | grep -E '^({SWARMUI}|{MOUNT})(/|$)' | sort -r | xargs -r umount\n"
        f"cp /root/fstab.ground /etc/fstab && rm -rf {SWARMUI}\n"
        f"mkdir -p {SWARMUI}/Data {SWARMUI}/src/Extensions/MyExt\n"
        f"echo from-clone > {SWARMUI}/Data/Settings.fds\n"
        f"echo roles > {SWARMUI}/Data/Roles.fds\n"
        f"echo ext > {SWARMUI}/src/Extensions/MyExt/MyExt.cs"
    )

    again, _ = play(host, tmp_path)
    assert again.returncode == 0, again.stdout
    assert host.sh(f"cat {SWARMUI}/Data/Settings.fds") == "from-volume\n"  # the volume's copy wins
    assert host.sh(f"cat {SWARMUI}/Data/Roles.fds") == "roles\n"  # carried, not hidden under the mount
    assert host.sh(f"cat {MOUNT}/Extensions/MyExt/MyExt.cs") == "ext\n"
    assert host.sh(f"findmnt -n -o FSROOT {SWARMUI}/src/Extensions").strip() == "/Extensions"

    third, counts = play(host, tmp_path)
    assert counts["changed"] == 0, third.stdout


def test_a_format_interrupted_before_the_marker_is_finished_on_the_next_run(blank, tmp_path):
    host = blank
    host.sh(f"mkfs.ext4 -q -L gpu-rent {host.by_id}")  # what the role's format leaves, nothing more
    uuid = fs_uuid(host)

    result, _ = play(host, tmp_path)
    assert result.returncode == 0, result.stdout
    assert fs_uuid(host) == uuid
    assert host.volume_id in host.sh(f"cat {MARKER}")


def test_a_volume_that_is_not_attached_is_named_and_nothing_is_touched(blank, tmp_path):
    host = blank
    missing = "0123456789abcdef0123456789abcdef"
    result, _ = play(host, tmp_path, data_volume_id=missing, data_volume_wait_seconds=2)
    message = refusal(result)
    assert missing in message and f"/dev/disk/by-id/virtio-{missing[:20]}" in message, message

    result, _ = play(host, tmp_path, data_volume_id="")
    assert "data_volume_id is empty" in refusal(result)
    assert not host.mounted(MOUNT)
