"""playbooks/bootstrap.yml on a real ground host: SwarmUI up on 127.0.0.1, re-runs change nothing.

The host is prepared the way the data_volume role leaves it (state folders bind-mounted into
/opt/swarmui before SwarmUI is cloned), so the checkout must adopt a non-empty folder. The
playbook runs from a folder with no gpu-rent.vars: the project vars plugin adds nothing, and the
settings it would give come as extra vars.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.groundkit import HOST_VARS, REPO, Cloud, ssh, wait_for_ssh

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# What the project vars plugin gives on the ground (.ground/project/gpu-rent.vars).
GROUND_VARS = {
    "gpu_rent_swarmui_repo": "git://10.231.7.1/SwarmUI.git",
    "gpu_rent_swarmui_version": "0.9.8.2-standin",
    "gpu_rent_require_gpu": False,
}
PORT = 7801


def rent_host(cloud: Cloud, net) -> tuple[str, str]:
    """A fresh ground host (boot volume from the image, a blank data volume, floating IP), answering SSH;
    returns its address and the data volume's id."""
    # m1.small: bootstrap needs no GPU slot, and the ground's few GPU slots are shared with other tests.
    data = cloud.volume(4)
    server = cloud.server(net, cloud.volume(10, image=True), data, key_name=cloud.keypair(), flavor="m1.small")
    address = cloud.floating_ip(server)
    wait_for_ssh(address)
    return address, data.id


def run_bootstrap(host: tuple[str, str], workdir: Path, **extra) -> subprocess.CompletedProcess:
    """ansible-playbook playbooks/bootstrap.yml against one host, as an operator runs it with an -i."""
    return run_playbook("bootstrap.yml", host, workdir, **extra)


def run_playbook(name: str, host: tuple[str, str], workdir: Path, **extra) -> subprocess.CompletedProcess:
    """ansible-playbook playbooks/NAME against one host, with the ground's settings as extra vars."""
    address, data_volume_id = host
    inventory = workdir / "inventory.json"
    inventory.write_text(json.dumps({"gpu_rent_vm": {"hosts": {"vm": {
        "ansible_host": address,
        "gpu_rent_data_volume_id": data_volume_id,
        **HOST_VARS,
    }}}}))  # fmt: skip
    extra_vars = workdir / "extra-vars.json"
    extra_vars.write_text(json.dumps(GROUND_VARS | extra))
    env = {"PATH": f"{ANSIBLE_PLAYBOOK.parent}:/usr/bin:/bin", "HOME": str(Path.home()),
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}  # fmt: skip
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "-e", f"@{extra_vars}", str(REPO / "playbooks" / name)],
        cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    """The PLAY RECAP counters of the host, e.g. {"ok": 30, "changed": 0, "failed": 0, ...}."""
    line = re.search(r"^vm\s+:(.*)$", result.stdout, re.M)
    assert line, f"no PLAY RECAP in:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


def converged(result: subprocess.CompletedProcess) -> str:
    return f"rc={result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"


def global_status(address: str) -> dict:
    """GetGlobalStatus asked on the host itself, through 127.0.0.1, as the idle-killer will."""
    api = f"http://127.0.0.1:{PORT}/API"
    script = (
        f"sid=$(curl -sf -X POST -H 'Content-Type: application/json' -d '{{}}' {api}/GetNewSession"
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"session_id\"])') && "
        f'curl -sf -X POST -H \'Content-Type: application/json\' -d "{{\\"session_id\\": \\"$sid\\"}}" '
        f"{api}/GetGlobalStatus"
    )
    result = ssh(address, script)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def rented(bootstrapped):
    """The session's bootstrapped host, whose data volume was blank: (address, data volume id)."""
    return bootstrapped[0]


@pytest.fixture(scope="module")
def host(rented):
    return rented[0]


@pytest.fixture(scope="module")
def first_run(bootstrapped):
    return bootstrapped[1]


def test_bootstrap_brings_swarmui_up_through_the_bind_mounts(host, first_run):
    assert first_run.returncode == 0, converged(first_run)
    assert ssh(host, "systemctl is-active swarmui").stdout.strip() == "active"
    status = global_status(host)
    assert status["backend_status"]["status"] == "running", status
    # The clone went around the bind mounts: ComfyUI and the settings are on the data disk.
    check = ssh(host, "ls /mnt/swarm_data/dlbackend/ComfyUI/main.py /mnt/swarm_data/Data/Settings.fds "
                      "/mnt/swarm_data/Data/Backends.fds && git -C /opt/swarmui describe --tags")  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines()[-1] == "0.9.8.2-standin"


def test_swarmui_listens_on_127_0_0_1_only(host, first_run):
    assert first_run.returncode == 0, converged(first_run)
    listeners = ssh(host, f"ss -ltnH 'sport = :{PORT}'").stdout.split("\n")
    addresses = [line.split()[3] for line in listeners if line.strip()]
    assert addresses == [f"127.0.0.1:{PORT}"]
    # and from outside, the port is closed
    probe = subprocess.run(["curl", "-s", "-m", "3", "-o", "/dev/null", f"http://{host}:{PORT}/"], capture_output=True)
    assert probe.returncode != 0


def test_a_second_run_changes_nothing_and_keeps_swarmui_running(rented, host, first_run, tmp_path):
    assert first_run.returncode == 0, converged(first_run)
    pid = ssh(host, "systemctl show -p MainPID --value swarmui").stdout.strip()
    second = run_bootstrap(rented, tmp_path)
    assert second.returncode == 0, converged(second)
    assert recap(second)["changed"] == 0, converged(second)
    assert ssh(host, "systemctl show -p MainPID --value swarmui").stdout.strip() == pid


def test_the_users_settings_stay_and_only_owned_keys_are_corrected(rented, host, first_run, tmp_path):
    assert first_run.returncode == 0, converged(first_run)
    settings = "/opt/swarmui/Data/Settings.fds"
    edit = ssh(host, f"sed -i 's/^IsInstalled: true/IsInstalled: false/' {settings} && "
                     f"printf 'DefaultUser:\\n    Theme: modern_light\\n' >> {settings}")  # fmt: skip
    assert edit.returncode == 0, edit.stderr
    rerun = run_bootstrap(rented, tmp_path)
    assert rerun.returncode == 0, converged(rerun)
    text = ssh(host, f"cat {settings}").stdout
    assert "IsInstalled: true" in text
    assert "Theme: modern_light" in text
    assert global_status(host)["backend_status"]["status"] == "running"


# a package of the NVIDIA userspace, by name only (the ground has no driver): what the bootstrap holds
NVIDIA_PACKAGE = (
    "d=$(mktemp -d) && mkdir $d/DEBIAN && printf 'Package: libnvidia-compute-580\\nVersion: 580.95-0\\n"
    "Architecture: all\\nMaintainer: ground <ground@localhost>\\nDescription: a name to hold\\n' > $d/DEBIAN/control"
    " && dpkg-deb --build $d $d.deb >/dev/null && dpkg -i $d.deb >/dev/null && rm -rf $d $d.deb"
)


def test_a_warm_run_finds_and_mends_a_wrong_bind_and_a_stopped_swarmui(rented, host, first_run, tmp_path):
    """What a warm run skips on its probe's word must still be found: a bind over the boot disk (made while
    the data volume was missing) and a stopped swarmui make it do the work. A package installed since (the
    dpkg database changed) has the packages checked again, and the NVIDIA userspace held at its version."""
    assert first_run.returncode == 0, converged(first_run)
    broken = ssh(host, "systemctl stop swarmui && umount /opt/swarmui/Models && "
                       f"mount -t tmpfs tmpfs /opt/swarmui/Models && {NVIDIA_PACKAGE}")  # fmt: skip
    assert broken.returncode == 0, broken.stderr
    rerun = run_bootstrap(rented, tmp_path)
    assert rerun.returncode == 0, converged(rerun)
    assert recap(rerun)["changed"] > 0, converged(rerun)
    assert "TASK [bootstrap : Hold the NVIDIA driver's packages" in rerun.stdout, converged(rerun)
    assert ssh(host, "apt-mark showhold").stdout.split() == ["libnvidia-compute-580"]
    top = ssh(host, "findmnt -n -o SOURCE,FSROOT --mountpoint /opt/swarmui/Models | tail -1").stdout.split()
    assert top[-1] == "/Models" and "tmpfs" not in top[0], top  # the data volume's Models, the tmpfs undone
    assert ssh(host, "systemctl is-active swarmui").stdout.strip() == "active"
    assert global_status(host)["backend_status"]["status"] == "running"


def test_require_gpu_on_a_host_without_one_fails_in_words(rented, host, first_run, tmp_path):
    result = run_bootstrap(rented, tmp_path, bootstrap_require_gpu=True)
    assert result.returncode != 0
    assert "GPU: no NVIDIA GPU visible (nvidia-smi missing, no /proc/driver/nvidia)" in result.stdout


def test_too_little_disk_fails_naming_the_mount_the_free_space_and_the_need(rented, host, first_run, tmp_path):
    result = run_bootstrap(rented, tmp_path, bootstrap_min_free_gb=100000)
    assert result.returncode != 0
    named = r"disk: / has [0-9.]+ GB free, need 105000\.0 GB \(100000 GB \+ 5 %\)"
    assert re.search(named, result.stdout), converged(result)


def test_a_new_version_is_checked_out_rebuilt_and_restarted(rented, host, first_run, tmp_path):
    """The ground's repository has one commit, so the host gets a copy with a newer tag of its own."""
    assert first_run.returncode == 0, converged(first_run)
    make = (
        "set -e; git clone -q --bare git://10.231.7.1/SwarmUI.git /srv/SwarmUI.git; "
        "git clone -q /srv/SwarmUI.git /tmp/next; cd /tmp/next; echo next >> README.md; "
        "git -c user.name=t -c user.email=t@localhost commit -qam next; git tag 0.9.8-test; "
        "git push -q origin 0.9.8-test; git rev-parse HEAD"
    )
    made = ssh(host, make)
    assert made.returncode == 0, made.stderr
    new_head = made.stdout.strip()
    pid = ssh(host, "systemctl show -p MainPID --value swarmui").stdout.strip()
    moved = run_bootstrap(rented, tmp_path, swarmui_repo="/srv/SwarmUI.git", swarmui_version="0.9.8-test")
    assert moved.returncode == 0, converged(moved)
    assert recap(moved)["changed"] > 0
    after = ssh(host, "git -C /opt/swarmui rev-parse HEAD; cat /opt/swarmui/src/bin/last_build; "
                      "systemctl show -p MainPID --value swarmui").stdout.split()  # fmt: skip
    assert after[0] == new_head
    assert after[1] == new_head  # the launcher rebuilt for the new HEAD
    assert after[2] != pid
    assert global_status(host)["backend_status"]["status"] == "running"
    again = run_bootstrap(rented, tmp_path, swarmui_repo="/srv/SwarmUI.git", swarmui_version="0.9.8-test")
    assert recap(again)["changed"] == 0, converged(again)
