"""Reconcile and leftovers: pure decisions over one look at the cloud."""

import threading

import pytest

from gpu_rent.cloud.view import (
    TAG,
    CloudView,
    FloatingIP,
    Leftover,
    Server,
    Volume,
    leftovers,
    lists_any,
    missing_preemptible,
    proven_resources,
    reconcile,
    side_by_side,
    stale_ids,
)
from gpu_rent.project.settings import resource_names
from gpu_rent.project.state import Phase, State
from gpu_rent.rental.runner import failure_message, unreachable_message


def server(id="s1", name="gpu-rent", status="ACTIVE", tags=("gpu-rent", "preemptible"), metadata=()):
    return Server(id, name, status, "active", tags, "gpu.l4.1", "2026-11-29T20:00:00Z", (), metadata=metadata)


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
        servers=(server(), server(id="s2", name="gpu-rent"), server(id="s3", metadata=((TAG, "gpu-rent"),))),
        floating_ips=(ip(), ip(id="f2", port=None, description=""), ip(id="f3", port=None)),
    )
    found = {x.id: x for x in leftovers(state, view, "gpu-rent", cli="openstack --os-cloud c")}
    assert set(found) == {"s2", "s3", "f2", "f3"}
    assert found["s2"].delete_command == "openstack --os-cloud c server delete s2"  # a second one of this NAME
    assert "a second server with this project's name" in found["s2"].detail
    assert found["s3"].delete_command == "openstack --os-cloud c server delete s3"
    assert found["f2"].delete_command == "openstack --os-cloud c floating ip delete f2"
    assert "left after its server went" in found["f3"].detail


def test_a_tagged_server_of_another_name_without_the_mark_gets_no_delete_command():
    """gpu-rent names a server after its NAME: one unmarked (made before the mark, or tagged by hand) is taken for
    the NAME its name says, whose folder ends it; a delete command here could end that rental's work unsaved."""
    view = CloudView(servers=(server(id="s2", name="forgotten"),))
    (stray,) = leftovers(State(), view, "gpu-rent", cli="openstack --os-cloud c")
    assert stray.delete_command is None and "server delete" not in stray.detail + stray.end
    assert (
        stray.detail
        == "forgotten (ACTIVE, tags gpu-rent,preemptible): belongs to gpu-rent project NAME=forgotten (by its name)"
    )
    assert stray.end == "`gpu-rent stop` in the project folder of NAME=forgotten"
    # marked with this NAME but with our name taken by another NAME's mark: the mark says whose it is
    theirs = server(id="s4", metadata=((TAG, "other"),))
    (marked,) = leftovers(State(), CloudView(servers=(server(id="s1"), theirs)), "gpu-rent")
    assert marked.id == "s4" and marked.delete_command is None and marked.end.endswith("NAME=other")


def test_the_cloud_lists_one_of_the_state_s_ids_or_none():
    state = State(resources={"server": "s1", "floating_ip_address": "10.231.7.20", "data_volume": "d1"})
    assert not lists_any(state, CloudView(servers=(server(id="s9"),)))  # a look elsewhere: none of them
    assert lists_any(state, CloudView(volumes=(Volume("d1", "gpu-rent-data", "available", 4, "ru-7a", "data"),)))
    assert lists_any(state, CloudView(servers=(server(),))) and not lists_any(State(), CloudView(servers=(server(),)))


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
    from gpu_rent.cloud.view import Volume

    view = CloudView(volumes=(Volume("v1", "gpu-rent-data", "available", 4, "ru-7a", "data"),
                              Volume("v2", "old-data", "available", 4, "ru-7a", "data")))  # fmt: skip
    assert [x.id for x in leftovers(State(), view, "gpu-rent")] == ["v2"]


def test_stale_ids_are_the_ones_the_cloud_no_longer_has():
    state = State(resources={"server": "s1", "floating_ip": "f1", "floating_ip_address": "a", "boot_volume": "b"})
    assert stale_ids(state, CloudView()) == ["server", "floating_ip", "floating_ip_address", "boot_volume"]
    assert stale_ids(state, CloudView(servers=(server(),), floating_ips=(ip(),))) == ["boot_volume"]
    boot = Volume("b", "gpu-rent-boot", "available", 50, "ru-7a", "boot")
    assert stale_ids(state, CloudView(servers=(server(),), volumes=(boot,), floating_ips=(ip(),))) == []
    kept = State(resources={"data_volume": "d"})  # deleted in the panel: the next up makes an empty one
    assert stale_ids(kept, CloudView(volumes=(boot,))) == ["data_volume"]


def test_a_lost_state_gets_back_what_the_cloud_proves_is_this_projects():
    attached = Server("s1", "gpu-rent", "ACTIVE", "active", ("gpu-rent",), "gpu.l4.1", None, ("10.231.7.20",))
    view = CloudView(
        servers=(attached,),
        volumes=(Volume("b1", "gpu-rent-boot", "in-use", 50, "ru-7a", "gpu-rent"),
                 Volume("d1", "gpu-rent-data", "in-use", 100, "ru-7a", "gpu-rent"),
                 Volume("x1", "other-boot", "available", 50, "ru-7a", "other")),
        floating_ips=(ip("f9", port=None, address="10.231.7.99"), ip()),
    )  # fmt: skip
    assert proven_resources(State(), view, "gpu-rent") == {
        "boot_volume": "b1", "data_volume": "d1", "server": "s1", "floating_ip": "f1",
        "floating_ip_address": "10.231.7.20",
    }  # fmt: skip
    # what the state has is never overwritten; a detached address of ours stays a leftover, not the state's
    kept = State(resources={"boot_volume": "b0", "server": "s1"})
    assert proven_resources(kept, view, "gpu-rent") == {
        "data_volume": "d1", "floating_ip": "f1", "floating_ip_address": "10.231.7.20"
    }  # fmt: skip
    assert proven_resources(State(), CloudView(volumes=view.volumes, floating_ips=view.floating_ips), "gpu-rent") == {
        "boot_volume": "b1", "data_volume": "d1"
    }  # fmt: skip


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


# Nova's GET /servers/detail at microversion 2.100, as the test ground answers it (trimmed to what matters)
NOVA_SERVER = {
    "id": "a222a93e",
    "name": "gpu-rent",
    "status": "ACTIVE",
    "OS-EXT-STS:vm_state": "active",
    "OS-EXT-STS:task_state": None,
    "tags": ["gpu-rent", "preemptible"],
    "flavor": {"vcpus": 8, "ram": 32768, "original_name": "gpu.l4.1", "extra_specs": {"gpu:count": "1"}},
    "created": "2026-12-06T00:41:01Z",
    "updated": "2026-12-06T00:41:10Z",
    "addresses": {
        "gpu-rent-net-ru-7a": [
            {"version": 4, "addr": "192.168.77.5", "OS-EXT-IPS:type": "fixed"},
            {"version": 4, "addr": "10.231.7.21", "OS-EXT-IPS:type": "floating"},
        ]
    },
    "metadata": {"gpu-rent": "gpu-rent", "a": "1"},
    "OS-EXT-AZ:availability_zone": "ru-7a",
}


def test_nova_s_json_becomes_the_server_the_view_holds():
    from gpu_rent.cloud.view import Server, servers_of

    faulted = {**NOVA_SERVER, "id": "b1", "status": "ERROR", "fault": {"code": 500, "message": "No valid host"}}
    (ours, failed) = servers_of([NOVA_SERVER, faulted], resource_names("gpu-rent"))
    assert ours == Server(
        "a222a93e", "gpu-rent", "ACTIVE", "active", ("gpu-rent", "preemptible"), "gpu.l4.1", "2026-12-06T00:41:01Z",
        ("10.231.7.21",), None, (("a", "1"), ("gpu-rent", "gpu-rent")), "2026-12-06T00:41:10Z",
    )  # fmt: skip
    assert failed.fault == "No valid host"


def test_only_our_live_servers_are_kept_a_lost_tag_does_not_hide_ours():
    from gpu_rent.cloud.view import servers_of

    untagged_ours = {**NOVA_SERVER, "id": "s2", "tags": []}
    deleted = {**NOVA_SERVER, "id": "s3", "status": "DELETED"}
    foreign = {**NOVA_SERVER, "id": "s4", "name": "web", "tags": []}
    tagged_other = {**NOVA_SERVER, "id": "s5", "name": "other"}
    kept = servers_of([untagged_ours, deleted, foreign, tagged_other], resource_names("gpu-rent"))
    assert [s.id for s in kept] == ["s2", "s5"]


def test_cinder_and_neutron_json_become_volumes_floating_ips_and_the_snapshot():
    from gpu_rent.cloud.view import FloatingIP, Volume, floating_ips_of, snapshots_of, volumes_of

    wanted = resource_names("gpu-rent")
    volumes = [
        {"id": "v1", "name": "gpu-rent-data", "status": "in-use", "size": 4, "availability_zone": "ru-7a",
         "metadata": {"gpu-rent": "data"}, "bootable": "false"},
        {"id": "v2", "name": "old-boot", "status": "available", "size": 10, "availability_zone": "ru-7b",
         "metadata": {"gpu-rent": "boot"}},
        {"id": "v3", "name": "unrelated", "status": "available", "size": 1, "availability_zone": "ru-7a",
         "metadata": {}},
    ]  # fmt: skip
    assert volumes_of(volumes, wanted) == (
        Volume("v1", "gpu-rent-data", "in-use", 4, "ru-7a", "data"),
        Volume("v2", "old-boot", "available", 10, "ru-7b", "boot"),
    )
    ips = [
        {"id": "f1", "floating_ip_address": "10.231.7.21", "port_id": "p1", "fixed_ip_address": "192.168.77.5",
         "description": "gpu-rent gpu-rent", "status": "DOWN"},
        {"id": "f2", "floating_ip_address": "10.231.7.22", "port_id": None, "fixed_ip_address": None,
         "description": None},
    ]  # fmt: skip
    assert floating_ips_of(ips) == (
        FloatingIP("f1", "10.231.7.21", "p1", "gpu-rent gpu-rent", "192.168.77.5"),
        FloatingIP("f2", "10.231.7.22", None, "", None),
    )
    snapshots = [{"id": "n1", "name": "gpu-rent-boot-ok", "status": "available"}, {"id": "n2", "name": "x-boot-ok"}]
    assert snapshots_of(snapshots, wanted) == ("n1",)


def test_json_without_a_field_every_item_has_is_refused_not_guessed():
    from gpu_rent.cloud.view import servers_of

    with pytest.raises(KeyError):
        servers_of([{k: v for k, v in NOVA_SERVER.items() if k != "status"}], resource_names("gpu-rent"))


def test_another_names_server_and_any_volume_are_named_with_no_command_that_deletes_them():
    """A delete command for another folder's server may end its work unsaved; for a volume, someone's data (P6)."""
    other = Server("s9", "other-vm", "ACTIVE", "active", ("gpu-rent",), "gpu.l4.1", None, (), metadata=((TAG, "x"),))
    renamed = Volume("v9", "gpu-rent-old-data", "available", 200, "ru-7a", "data")
    found = {x.id: x for x in leftovers(State(), CloudView(servers=(other,), volumes=(renamed,)), "gpu-rent")}
    assert found["s9"].delete_command is None and "NAME=x" in found["s9"].detail
    assert found["s9"].end == "`gpu-rent stop` in the project folder of NAME=x"
    assert found["v9"].delete_command is None and "holds data" in found["v9"].end
    assert "--i-understand-data-loss" in found["v9"].end


def test_status_prints_how_a_leftover_ends_where_it_gives_no_delete_command():
    import io

    from rich.console import Console

    from gpu_rent.rental.report import StatusReport

    kept = Leftover(
        "volume", "v9", "gpu-rent-old-data (200 GB available)", None, "it holds data: destroy from its folder"
    )
    stray = Leftover("floating_ip", "f9", "10.0.0.9: unattached floating IP", "openstack floating ip delete f9")
    report = StatusReport(project="/p", cloud="c", phase=Phase.IDLE, phase_note="n", server=None, address=None,
                          volumes=[], leftovers=[kept, stray], minutes_alive=None, cost_so_far=None,
                          price_per_hour=None)  # fmt: skip
    out = io.StringIO()
    report.render(Console(file=out, width=200))
    shown = out.getvalue()
    assert "ends with it holds data: destroy from its folder" in shown and "volume delete" not in shown
    assert "delete: openstack floating ip delete f9" in shown
    assert report.to_json()["leftovers"][0] == {
        "kind": "volume", "id": "v9", "detail": kept.detail, "delete_command": None, "end": kept.end,
    }  # fmt: skip
