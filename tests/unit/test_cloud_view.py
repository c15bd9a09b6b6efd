"""Reconcile and leftovers: pure decisions over one look at the cloud."""

import threading

import pytest

from gpu_rent.cloud import (
    CloudView,
    FloatingIP,
    Server,
    leftovers,
    missing_preemptible,
    reconcile,
    side_by_side,
    stale_ids,
)
from gpu_rent.runner import failure_message, unreachable_message
from gpu_rent.state import Phase, State


def server(id="s1", name="gpu-rent", status="ACTIVE", tags=("gpu-rent", "preemptible")):
    return Server(id, name, status, "active", tags, "gpu.l4.1", "2026-11-29T20:00:00Z", ())


def ip(id="f1", port="p1", description="gpu-rent gpu-rent", address="10.231.7.20"):
    return FloatingIP(id, address, port, description, None)


@pytest.mark.parametrize(
    ("phase", "servers", "expected"),
    [
        (Phase.IDLE, (), Phase.IDLE),
        (Phase.READY_CLOUD, (), Phase.IDLE),  # the idle-killer or a direct stop took it
        (Phase.BOOTSTRAPPING, (), Phase.IDLE),
        (Phase.READY_CLOUD, (server(),), Phase.READY_CLOUD),  # alive with no local process is normal
        (Phase.IDLE, (server(),), Phase.PROVISIONING),  # a server the state did not know
        (Phase.IDLE, (server(name="other"),), Phase.IDLE),  # not ours
    ],
)
def test_reconcile(phase, servers, expected):
    assert reconcile(State(phase=phase), CloudView(servers=servers), "gpu-rent")[0] == expected


def test_leftovers_name_foreign_tagged_servers_and_unattached_ips_with_delete_commands():
    state = State(resources={"server": "s1", "floating_ip": "f1"})
    view = CloudView(
        servers=(server(), server(id="s2", name="forgotten")),
        floating_ips=(ip(), ip(id="f2", port=None, description=""), ip(id="f3", port=None)),
    )
    found = {x.id: x for x in leftovers(state, view, "gpu-rent", cli="openstack --os-cloud c")}
    assert set(found) == {"s2", "f2", "f3"}
    assert found["s2"].delete_command == "openstack --os-cloud c server delete s2"
    assert found["f2"].delete_command == "openstack --os-cloud c floating ip delete f2"
    assert "left after its server went" in found["f3"].detail


def test_a_kept_floating_ip_is_named_with_its_delete_command():
    state = State(resources={"floating_ip": "f1"})
    (kept,) = leftovers(state, CloudView(floating_ips=(ip(port=None),)), "gpu-rent")
    assert "KEEP_FLOATING_IP" in kept.detail and kept.delete_command == "openstack floating ip delete f1"


def test_a_second_server_with_our_name_is_a_leftover_and_the_recorded_one_is_ours():
    state = State(resources={"server": "s2"})
    view = CloudView(servers=(server(id="s1"), server(id="s2")))
    assert [x.id for x in leftovers(state, view, "gpu-rent")] == ["s1"]


def test_a_server_that_lost_its_tags_is_still_ours_and_still_seen():
    untagged = server(tags=())
    view = CloudView(servers=(untagged,))
    assert view.server("gpu-rent") == untagged
    assert missing_preemptible(untagged) and not missing_preemptible(server())
    assert stale_ids(State(resources={"server": "s1"}), view) == []


def test_volumes_of_another_name_are_leftovers_ours_are_not():
    from gpu_rent.cloud import Volume

    view = CloudView(volumes=(Volume("v1", "gpu-rent-data", "available", 4, "ru-7a", "data"),
                              Volume("v2", "old-data", "available", 4, "ru-7a", "data")))  # fmt: skip
    assert [x.id for x in leftovers(State(), view, "gpu-rent")] == ["v2"]


def test_stale_ids_are_the_ones_the_cloud_no_longer_has():
    state = State(resources={"server": "s1", "floating_ip": "f1", "floating_ip_address": "a", "boot_volume": "b"})
    assert stale_ids(state, CloudView()) == ["server", "floating_ip", "floating_ip_address"]
    assert stale_ids(state, CloudView(servers=(server(),), floating_ips=(ip(),))) == []


def test_failure_message_is_one_line_and_picks_the_failed_loop_item():
    assert failure_message({"msg": "No valid host\nwas found."}) == "No valid host was found."
    res = {"msg": "One or more items failed", "results": [{"failed": False}, {"failed": True, "msg": "volume x"}]}
    assert failure_message(res) == "volume x"
    assert failure_message({}) == "failed"


def test_a_failed_command_is_told_by_its_own_last_words():
    res = {"msg": "non-zero return code", "rc": 1, "stderr": "resize2fs 1.47.0\nresize2fs: Permission denied"}
    assert failure_message(res) == "exit code 1: resize2fs: Permission denied"
    assert failure_message({"msg": "non-zero return code", "rc": 2}) == "non-zero return code"


def test_an_unreachable_vm_is_said_as_such_with_what_to_do():
    said = (
        'Task failed: Data could not be sent to remote host "10.0.0.5". Make sure this host can be reached over ssh: '
    )
    assert unreachable_message(said) == (
        'the VM does not answer over SSH (Data could not be sent to remote host "10.0.0.5". Make sure this host can '
        "be reached over ssh); once it does, the same command resumes"
    )


def test_side_by_side_runs_the_calls_at_once_keeps_their_order_and_raises_the_first_error():
    meet = threading.Barrier(3, timeout=10)  # passes only when all three run at the same time

    def call(value):
        return lambda: (meet.wait(), value)[1]

    assert side_by_side(call("servers"), call("volumes"), call("ips")) == ["servers", "volumes", "ips"]

    def refused():
        raise PermissionError("refused")

    with pytest.raises(PermissionError, match="refused"):
        side_by_side(lambda: 1, refused)
