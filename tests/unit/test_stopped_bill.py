"""What a server standing stopped still bills: the line status and up print after a preemption."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from gpu_rent.cloud import view as cloud
from gpu_rent.project.state import Phase
from gpu_rent.rental.report import StatusReport
from gpu_rent.rental.stopped_bill import Prices, line

T = 1_796_000_000.0
PRICED = Prices(server=30.0, floating_ip=0.25, disk_gb=0.01)


def clock(unix: float) -> str:
    return time.strftime("%H:%M", time.localtime(unix))


@pytest.mark.parametrize("status", ["EXPIRED", "SHELVED_OFFLOADED", "SHELVED", "expired"])
def test_a_preempted_server_bills_its_address_and_disks_not_its_gpu(status):
    said = line(status, T, "203.0.113.7", 150, PRICED, T + 2.5 * 3600)
    assert said.startswith(f"preempted (stopped by the cloud) at {clock(T)}, nothing on it runs; still billing: ")
    assert "floating IP 203.0.113.7, disks 150 GB" in said and "server itself" not in said
    # 0.25 + 150 * 0.01 = 1.75 an hour; three started hours since
    assert said.endswith(", ~1.75/hour (~5.25 since)")


@pytest.mark.parametrize("status", ["SHUTOFF", "SUSPENDED", "PAUSED"])
def test_a_server_shut_off_or_suspended_still_bills_in_full(status):
    said = line(status, T, "203.0.113.7", 150, PRICED, T + 60)
    assert said.startswith(f"stopped ({status}) at {clock(T)}")
    assert f"the server itself ({status} bills in full)" in said and said.endswith("~31.75/hour (~31.75 since)")


def test_without_the_prices_it_names_what_bills_and_the_keys_that_price_it():
    said = line("EXPIRED", T, "203.0.113.7", 150, Prices(server=30.0), T)
    assert "floating IP 203.0.113.7, disks 150 GB" in said
    keys = "PRICE_DISK_GB_PER_HOUR and PRICE_FLOATING_IP_PER_HOUR"
    assert said.endswith(f"(set {keys} in gpu-rent.vars to see what it costs)")


def test_no_address_kept_and_no_time_known():
    said = line("EXPIRED", None, None, 60, PRICED, T)
    assert said == "preempted (stopped by the cloud), nothing on it runs; still billing: disks 60 GB, ~0.60/hour"


def test_a_server_in_error_is_said_to_bill_until_deleted():
    """Money review #14: status had no line for ERROR, so it never said whether the failed server billed."""
    said = line("ERROR", T, "203.0.113.7", 150, PRICED, T + 60)
    assert said.startswith(f"failed (ERROR) at {clock(T)}, nothing on it runs; still billing: the server itself "
                           "(in ERROR it may bill until deleted), floating IP 203.0.113.7, disks 150 GB")  # fmt: skip
    assert said.endswith("~31.75/hour (~31.75 since)")


@pytest.mark.parametrize("status", ["ACTIVE", "BUILD", "REBOOT", "SOMETHING_NEW"])
def test_a_server_that_runs_or_is_underway_has_no_such_line(status):
    assert line(status, T, "203.0.113.7", 150, PRICED, T) is None


def test_novas_times_read_as_unix_times():
    assert cloud.unix_time("2026-12-02T08:40:56Z") == 1796200856.0
    assert cloud.unix_time("2026-12-02T08:40:56") == 1796200856.0  # no zone: Nova's are UTC
    assert cloud.unix_time("") is None and cloud.unix_time(None) is None and cloud.unix_time("tuesday") is None


def test_the_address_is_the_servers_else_the_projects_own_floating_ip():
    ours = cloud.FloatingIP("fip", "203.0.113.9", None, "gpu-rent gpu-rent", None)
    other = cloud.FloatingIP("fip2", "203.0.113.10", None, "gpu-rent another", None)
    stopped = cloud.Server("s", "gpu-rent-vm", "EXPIRED", "stopped", (), "f", None, ())
    view = cloud.CloudView(servers=(stopped,), floating_ips=(other, ours))
    assert cloud.our_address(view, stopped, "gpu-rent") == "203.0.113.9"  # detached by the stop, still ours
    running = cloud.Server("s", "gpu-rent-vm", "ACTIVE", "active", (), "f", None, ("198.51.100.4",))
    assert cloud.our_address(view, running, "gpu-rent") == "198.51.100.4"
    assert cloud.our_address(cloud.CloudView(), None, "gpu-rent") is None


@pytest.mark.parametrize(
    ("status", "advice"),
    [("ERROR", "`gpu-rent up` deletes it and rents a new one on them"),
     ("EXPIRED", "`gpu-rent up` brings the VM back")],
)  # fmt: skip
def test_status_says_what_each_command_does_to_the_standing_server(status, advice):
    server = cloud.Server("s1", "gpu-rent", status, None, ("gpu-rent",), "gpu.a100.1", None, ())
    report = StatusReport("/p", "ground", Phase.READY_CLOUD, "", server, None, [], [], None, None, None,
                          stopped_bill=line(status, T, None, 60, PRICED, T))  # fmt: skip
    out = Console(width=300, record=True, file=io.StringIO())
    report.render(out)
    assert advice in out.export_text()
