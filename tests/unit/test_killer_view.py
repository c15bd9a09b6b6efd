"""What `gpu-rent status` says of the VM's idle-killer, from the status file the killer writes."""

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from gpu_rent.to_vm import killer_view
from gpu_rent.to_vm.killer_view import describe, unguarded

NOW = 1_800_000_000.0


def status(**kw) -> dict:
    return {"tick_at": NOW - 20, "action": "keep", "reason": "queue empty, idle for 3 min", "fires_at": NOW + 27 * 60,
            "credential": {"state": "ok"}} | kw  # fmt: skip


def clock(unix: float) -> str:
    return time.strftime("%H:%M", time.localtime(unix))


def test_an_idle_vm_says_when_it_goes():
    assert describe(status(), NOW) == f"armed, fires in 27 min at {clock(NOW + 27 * 60)} (queue empty, idle for 3 min)"


def test_a_vm_kept_to_the_end_of_a_paid_hour_says_until_when():
    paid = status(
        fires_at=NOW + 26 * 60,
        paid_until=NOW + 29 * 60,
        reason="queue empty, idle for 31 min; the hour is paid for 29 min more",
    )
    assert describe(paid, NOW).endswith(
        f"at {clock(NOW + 26 * 60)} (queue empty, idle for 31 min; the hour is paid for 29 min more);"
        f" the hour is paid until {clock(NOW + 29 * 60)}"
    )


@pytest.mark.parametrize(
    "reason", ["hold for 90 min more", "2 waiting gens", "download of Lora/x.tmp", "grace after boot, 44 min left"]
)
def test_what_keeps_the_vm_is_named(reason):
    assert describe(status(fires_at=None, reason=reason), NOW) == f"armed, kept alive by: {reason}"


def test_a_refused_credential_is_said_first_and_loudly():
    refused = {"state": "refused", "message": "Keystone refused the credential (HTTP 401)"}
    line = describe(status(credential=refused), NOW)
    assert line.startswith("CREDENTIAL REFUSED, the VM cannot delete itself: Keystone refused")


def test_a_killer_that_stopped_ticking_is_not_trusted():
    assert describe(status(tick_at=NOW - 3600), NOW).startswith(f"SILENT since {clock(NOW - 3600)}")


def test_no_report_and_deleting_are_said_as_they_are():
    assert describe(None, NOW).startswith("no report from the idle-killer")
    line = describe(status(action="delete", reason="queue empty, idle for 30 min: deleting this server",
                           acted="asked Nova to delete server s"), NOW)  # fmt: skip
    assert line.startswith("deleting this server: queue empty") and "asked Nova" in line


def test_a_credential_near_its_expiry_is_mentioned():
    soon = time.strftime("%Y-%m-%dT%H:%M:%S.000000", time.gmtime(NOW + 3600))
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(NOW + 5 * 86400))
    assert "credential expires at" in describe(status(credential_expires_at=soon), NOW)
    assert "expires" not in describe(status(credential_expires_at=later), NOW)


def test_a_driver_and_library_of_two_versions_is_said_loudly_with_its_mend():
    mismatch = "Failed to initialize NVML: Driver/library version mismatch"
    line = describe(status(gpu_error=mismatch, reason=f"GPU not read ({mismatch}): counted as busy for 50 min more"),
                    NOW)  # fmt: skip
    assert "GPU WORK NOT SEEN: the NVIDIA driver and its library differ" in line and "`sudo reboot`" in line
    assert "GPU WORK NOT SEEN" not in describe(status(gpu_error="no nvidia-smi on PATH"), NOW)


def test_a_damaged_report_is_said_not_raised():
    assert "unreadable" in describe(status(tick_at="x"), NOW)
    assert "unreadable" in describe(status(credential="ok"), NOW)


def test_our_backends_are_counted_once():
    running = "2 of 2 ComfyUI backends running"
    kept = describe(status(fires_at=None, reason="1 live gens", backends=running), NOW)
    assert kept == f"armed, kept alive by: 1 live gens; {running}"
    idle = describe(status(reason=f"queue empty, {running}, idle for 3 min", backends=running), NOW)
    assert idle.count(running) == 1


@pytest.fixture
def short_tmp(monkeypatch):
    """A temp folder short enough for a socket path (pytest's own is not)."""
    folder = Path(tempfile.mkdtemp(dir="/tmp", prefix="kv-"))
    monkeypatch.setattr(killer_view.tempfile, "gettempdir", lambda: str(folder))
    yield folder
    shutil.rmtree(folder)


def test_reads_share_one_ssh_connection_per_boot_volume_in_a_private_folder(short_tmp):
    options = killer_view._shared_connection("gpu-rent-0123456789abcdef")
    folder = short_tmp / f"gpu-rent-ssh-{os.getuid()}"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert f"ControlPath={folder}/01234567-%C" in options and "ControlMaster=auto" in options
    assert "ServerAliveInterval=2" in options  # a kept connection to a VM that is gone ends within seconds


def test_no_shared_connection_through_a_folder_others_can_enter(short_tmp):
    folder = short_tmp / f"gpu-rent-ssh-{os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    assert killer_view._shared_connection("gpu-rent-0123456789abcdef") == []


@pytest.mark.parametrize("tmpdir", ["/var/folders/" + "x" * 60, "/home/someone/.cache/tmp"])
def test_a_temp_folder_too_long_for_a_socket_falls_back_to_tmp(monkeypatch, tmpdir):
    """ssh binds ControlPath + "." + 16 characters first: that must fit the ~104 bytes of a socket path too."""
    monkeypatch.setattr(killer_view.tempfile, "gettempdir", lambda: tmpdir)
    options = killer_view._shared_connection("gpu-rent-01234567")
    assert f"ControlPath=/tmp/gpu-rent-ssh-{os.getuid()}/01234567-%C" in options


@pytest.mark.parametrize(
    ("credential", "head"),
    [({"state": "ok"}, "armed, "), ({"state": "unchecked"}, "UNPROVEN (its credential has not been proven yet), "),
     ({}, "UNPROVEN (its credential has not been proven yet), "),
     ({"state": "unreachable", "message": "Nova: HTTP 503"},
      "UNPROVEN (the cloud did not answer its proof: Nova: HTTP 503; it tries again), ")],
    ids=["proven", "unchecked", "none", "unreachable"],
)  # fmt: skip
def test_armed_is_said_only_of_a_proven_credential(credential, head):
    assert describe(status(fires_at=None, reason="2 waiting gens", credential=credential), NOW).startswith(head)


@pytest.mark.parametrize(
    ("seen", "server", "blind"),
    [(None, "s", True), ({"server_id": "old", "tick_at": NOW, "credential": {"state": "ok"}}, "s", True),
     ({"tick_at": NOW, "credential": {"state": "refused", "message": "no"}}, None, True),
     ({"tick_at": NOW, "credential": {"state": "unreachable", "message": "Nova: HTTP 503"}}, None, True),
     ({"tick_at": NOW - 3600, "credential": {"state": "ok"}}, None, True), ({"tick_at": "x"}, None, True),
     ({"tick_at": NOW, "reason": "2 waiting gens", "credential": {"state": "ok"}}, None, False),
     ({"tick_at": NOW, "action": "delete", "reason": "idle", "credential": {"state": "ok"}}, None, False)],
    ids=["no-report", "vm-before", "refused", "unproven", "silent", "unreadable", "armed", "deleting"],
)  # fmt: skip
def test_status_says_in_red_each_way_no_killer_is_known_to_delete_the_server(seen, server, blind):
    line = describe(seen, NOW, server)
    assert unguarded(line) is blind, line


@pytest.mark.parametrize("ahead", [-600.0, 0.0, 600.0])
def test_the_killers_times_are_read_against_the_vms_clock_and_said_in_the_laptops(ahead):
    """A laptop clock off by 10 minutes neither calls a ticking killer SILENT nor a dead one alive, and the
    times it shows are its own (money review #16): finish adds how far the VM's clock is ahead."""
    vm_now = NOW + ahead
    ticking = {**status(tick_at=vm_now - 20, fires_at=vm_now + 27 * 60), killer_view.VM_CLOCK_AHEAD: ahead}
    assert describe(ticking, NOW) == f"armed, fires in 27 min at {clock(NOW + 27 * 60)} (queue empty, idle for 3 min)"
    dead = {**status(tick_at=vm_now - 400), killer_view.VM_CLOCK_AHEAD: ahead}
    assert describe(dead, NOW) == f"SILENT since {clock(NOW - 400)}: its timer does not run; `gpu-rent up` re-arms it"


def test_a_read_gives_the_report_with_how_far_the_vms_clock_is_ahead(tmp_path):
    shell = shutil.which("sh")
    vm_clock = int(time.time()) + 3600
    proc = killer_view.subprocess.Popen([shell, "-c", f'echo {vm_clock}; echo \'{{"tick_at": 5}}\''],
                                        stdout=killer_view.subprocess.PIPE, text=True)  # fmt: skip
    read = killer_view.finish(proc)
    assert read["tick_at"] == 5 and 3590 < read[killer_view.VM_CLOCK_AHEAD] <= 3600
    garbled = killer_view.subprocess.Popen([shell, "-c", "echo '{\"tick_at\": 5}'"], stdout=killer_view.subprocess.PIPE,
                                           text=True)  # fmt: skip
    assert killer_view.finish(garbled) is None  # no clock line: not the reader's answer
    assert killer_view.READ_COMMAND.startswith("date +%s; cat ")
