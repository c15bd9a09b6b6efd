"""The last breath (on_vm/last_breath.py): a poweroff from inside the guest deletes the server, a reboot or the
cloud's own stop does not. Against the loopback Keystone and Nova of test_idle_killer_proof; on a real host
with the ground's Nova in tests/ground/test_idle_killer.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_rent.on_vm.last_breath import last_breath, shutdown_kind
from tests.unit.test_idle_killer_proof import SERVER, cloud_answering, config  # noqa: F401 - the fixture

# `systemctl list-jobs --no-legend --plain` during a shutdown, as systemd 252 prints it
POWEROFF = (
    "1234 poweroff.target start waiting\n1240 systemd-poweroff.service start waiting\n"
    "1301 gpu-rent-last-breath.service stop running\n"
)
REBOOT = "1234 reboot.target start waiting\n1240 systemd-reboot.service start waiting\n"


@pytest.mark.parametrize(
    ("jobs", "kind"),
    [(POWEROFF, "poweroff"), (REBOOT, "reboot"), ("77 halt.target start waiting\n", "poweroff"),
     ("9 kexec.target start waiting\n", "reboot"), (POWEROFF + REBOOT, "reboot"), ("", None),
     ("5 gpu-rent-last-breath.service stop running\n", None)],
    ids=["poweroff", "reboot", "halt", "kexec", "both", "nothing", "stopped-alone"],
)  # fmt: skip
def test_what_the_shutdown_is_comes_from_systemds_queued_jobs(jobs, kind):
    assert shutdown_kind(jobs) == kind


def test_a_poweroff_from_inside_deletes_the_server_then_its_address_and_says_why(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(200, {"server": {"id": SERVER, "status": "ACTIVE", "OS-EXT-STS:task_state": None}})
    words = tmp_path / "lib" / "last-words.json"
    cfg = config(tmp_path, cloud, floating_ip_id="f1", last_words_file=str(words))
    said: list[str] = []
    line = last_breath(cfg, POWEROFF, said.append)
    assert line.startswith("<4>last breath: the guest powered itself off") and "asked Nova to delete" in line
    assert [a for a in cloud.asked if a[0] == "DELETE"] == [
        ("DELETE", f"/compute/v2.1/servers/{SERVER}"), ("DELETE", "/network/v2.0/floatingips/f1")]  # fmt: skip
    kept = json.loads(words.read_text())  # on the boot volume: the next up tells them
    assert kept["server_id"] == SERVER and kept["reason"].startswith("the guest powered itself off")


@pytest.mark.parametrize(
    ("server", "jobs"),
    [({"status": "ACTIVE", "OS-EXT-STS:task_state": "shelving"}, POWEROFF),  # a preemption: restorable
     ({"status": "ACTIVE", "OS-EXT-STS:task_state": "powering-off"}, POWEROFF),
     ({"status": "SHUTOFF", "OS-EXT-STS:task_state": None}, POWEROFF),
     ({"status": "ACTIVE", "OS-EXT-STS:task_state": None}, REBOOT), ({"status": "ACTIVE"}, "")],
    ids=["shelving", "powering-off", "shutoff", "reboot", "unit-stopped-alone"],
)  # fmt: skip
def test_the_clouds_own_stop_a_reboot_and_a_stop_of_the_unit_alone_delete_nothing(
    tmp_path,
    cloud_answering,  # noqa: F811 - the fixture
    server,
    jobs,
):
    cloud = cloud_answering(200, {"server": {"id": SERVER, **server}})
    line = last_breath(config(tmp_path, cloud), jobs, lambda _: None)
    assert "DELETE" not in {a[0] for a in cloud.asked}, line
    assert line.startswith("<6>last breath:"), line


def test_a_refused_credential_at_the_poweroff_is_said_loudly(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(401, {})
    line = last_breath(config(tmp_path, cloud), POWEROFF, lambda _: None)
    assert line.startswith("<2>last breath: this poweroff leaves the server SHUT OFF and billing: Nova refused GET")
    assert not Path(tmp_path / "lib").exists()


def test_the_hypervisors_power_button_is_the_clouds_doing_not_the_guests(tmp_path, cloud_answering):  # noqa: F811
    """A stop below Nova (host maintenance through libvirt-guests): Nova shows ACTIVE with no task, and the
    guest sees an ACPI power button, which systemd-logind logs; the VM may come back, so it stays."""
    cloud = cloud_answering(200, {"server": {"id": SERVER, "status": "ACTIVE", "OS-EXT-STS:task_state": None}})
    logind = "New seat seat0.\nPower key pressed short.\nPowering off...\n"
    line = last_breath(config(tmp_path, cloud), POWEROFF, lambda _: None, logind=logind)
    assert line.startswith("<6>last breath: the cloud is stopping it (the power button was pressed"), line
    assert "DELETE" not in {a[0] for a in cloud.asked}
