"""What the data disk probe adds for a warm run (plugins/modules/data_disk_probe.py): fstab lines and sizes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.module_file import load

probe = load("data_disk_probe", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "data_disk_probe.py")

FSTAB = """\
# /etc/fstab: static file system information.
UUID=1111 / ext4 errors=remount-ro 0 1
UUID=2222 /mnt/swarm_data ext4 defaults,nofail 0 0  # gpu-rent
#UUID=3333 /mnt/swarm_data ext4 defaults 0 0
/mnt/swarm_data/Models /opt/swarmui/Models none bind,nofail 0 0
UUID=4444 /mnt/swarm_data_old ext4 defaults 0 0
"""


def test_fstab_lines_are_the_mount_points_own_split_as_the_mount_module_splits_them():
    assert probe.fstab_lines(FSTAB, "/mnt/swarm_data") == [
        ["UUID=2222", "/mnt/swarm_data", "ext4", "defaults,nofail", "0", "0"]
    ]
    assert probe.fstab_lines(FSTAB, "/opt/swarmui/Models")[0][0] == "/mnt/swarm_data/Models"
    assert probe.fstab_lines(FSTAB, "/mnt/elsewhere") == []


def test_two_lines_for_one_mount_point_both_come_back():
    text = FSTAB + "UUID=5555 /mnt/swarm_data xfs defaults 0 0\n"
    assert [fields[0] for fields in probe.fstab_lines(text, "/mnt/swarm_data")] == ["UUID=2222", "UUID=5555"]


def test_ext_bytes_is_block_count_times_block_size_or_none():
    assert probe.ext_bytes("Block count:              2621440\nBlock size:               4096\n") == 10 * 2**30
    assert probe.ext_bytes("Block count:              2621440\n") is None
    assert probe.ext_bytes("dumpe2fs: Bad magic number in super-block\n") is None


@pytest.mark.skipif(shutil.which("mkfs.ext4") is None, reason="needs e2fsprogs (mkfs.ext4, dumpe2fs)")
def test_a_filesystem_made_on_the_whole_disk_fills_it_within_the_roles_mib(tmp_path):
    disk = tmp_path / "disk.img"
    with disk.open("wb") as handle:
        handle.truncate(64 * 2**20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(disk)], check=True)
    header = subprocess.run(["dumpe2fs", "-h", str(disk)], capture_output=True, text=True, check=True).stdout
    assert probe.disk_size(str(disk)) == 64 * 2**20
    assert probe.ext_bytes(header) + 2**20 >= probe.disk_size(str(disk))  # the role skips resize2fs
    with disk.open("r+b") as handle:  # resize-data: the disk grew by a GiB, the filesystem did not
        handle.truncate(64 * 2**20 + 2**30)
    assert probe.ext_bytes(header) + 2**20 < probe.disk_size(str(disk))  # the role grows it


OPTS = "bind,nofail"
DEVNO = "259:1"  # the data volume's MAJ:MIN (mountpoint -x)
BINDS = [{"src": "Models", "target": "/opt/swarmui/Models"}]


def _mounts(models_from: str = "259:1", models_root: str = "/Models") -> list:
    """findmnt --json --list's filesystems: the data volume, then its Models bound into SwarmUI."""
    return [
        {"target": "/", "source": "/dev/vda1", "maj:min": "259:0", "fsroot": "/"},
        {"target": "/mnt/swarm_data", "source": "/dev/vdb", "maj:min": "259:1", "fsroot": "/"},
        {"target": "/opt/swarmui/Models", "source": "/dev/vdb[/Models]", "maj:min": models_from,
         "fsroot": models_root},
    ]  # fmt: skip


def test_binds_from_the_volumes_own_directories_and_in_fstab_are_in_place():
    assert probe.binds_in_place(_mounts(), FSTAB, DEVNO, "/mnt/swarm_data", BINDS, OPTS) is True
    assert probe.binds_in_place(_mounts(), FSTAB, DEVNO, "/mnt/swarm_data", [], OPTS) is True


@pytest.mark.parametrize(
    ("mounts", "fstab", "why"),
    [
        (_mounts(models_from="259:0"), FSTAB, "bound from the boot disk (made while the volume was not mounted)"),
        (_mounts(models_root="/Output"), FSTAB, "bound from another directory of the volume"),
        (_mounts()[:2], FSTAB, "not bound at all"),
        (_mounts(), FSTAB.replace("bind,nofail", "bind"), "fstab's line has other options"),
        (_mounts(), FSTAB.replace("/mnt/swarm_data/Models /opt", "#/mnt/swarm_data/Models /opt"), "fstab lacks it"),
        ([m for m in _mounts() if m["target"] != "/mnt/swarm_data"], FSTAB, "the volume is not mounted"),
    ],
)
def test_a_bind_the_shell_check_would_redo_is_not_in_place(mounts, fstab, why):
    assert probe.binds_in_place(mounts, fstab, DEVNO, "/mnt/swarm_data", BINDS, OPTS) is False, why


def test_the_top_mount_of_a_stacked_target_counts_as_findmnts_last_line():
    stacked = [*_mounts(), {"target": "/opt/swarmui/Models", "source": "tmpfs", "maj:min": "0:50", "fsroot": "/"}]
    assert probe.binds_in_place(stacked, FSTAB, DEVNO, "/mnt/swarm_data", BINDS, OPTS) is False
    assert probe.binds_in_place([*stacked, _mounts()[2]], FSTAB, DEVNO, "/mnt/swarm_data", BINDS, OPTS) is True


def test_another_disk_stacked_over_the_volume_is_not_in_place_though_its_paths_match():
    other = [
        {"target": "/mnt/swarm_data", "source": "/dev/vdc", "maj:min": "259:2", "fsroot": "/"},
        {"target": "/opt/swarmui/Models", "source": "/dev/vdc[/Models]", "maj:min": "259:2", "fsroot": "/Models"},
    ]
    assert probe.binds_in_place([*_mounts(), *other], FSTAB, DEVNO, "/mnt/swarm_data", BINDS, OPTS) is False
    # only the binds stacked, the volume itself still on top: the binds show the other disk
    assert probe.binds_in_place([*_mounts(), other[1]], FSTAB, DEVNO, "/mnt/swarm_data", BINDS, OPTS) is False
    # the volume mounted again over the other disk: on top once more
    assert probe.binds_in_place([*_mounts(), *other, *_mounts()[1:]], FSTAB, DEVNO, "/mnt/swarm_data", BINDS, OPTS)
