"""The pool scan: before the first up, a pool without room leaves nothing and the next pool is tried.

A pool is sold out the way a real one is: the admin books every free GPU of its compute in
Placement under a consumer that is no server, so the scheduler answers "No valid host". Only the
A10 class, which these projects rent and no other test does: the L4s of the pool stay free for the
tests that run meanwhile (the Molecule scenarios, in the background).
"""

import contextlib
import json
import uuid

import pytest

from tests.ground.test_rental import Ours, gpu_rent, last_up_log, make_project, state

FULL, FREE = "ru-7a", "ru-7b"
SOLD = "CUSTOM_GPU_A10"


@contextlib.contextmanager
def sold_out(admin_conn, pool: str):
    [compute] = [s for s in admin_conn.compute.services() if s.binary == "nova-compute" and s.availability_zone == pool]
    [provider] = list(admin_conn.placement.resource_providers(name=compute.host))

    def placement(method: str, path: str, **kw):
        response = admin_conn.session.request(
            path, method, endpoint_filter={"service_type": "placement"},
            headers={"OpenStack-API-Version": "placement 1.28"}, raise_exc=True, **kw,
        )  # fmt: skip
        return response.json() if response.content else None

    total = placement("GET", f"/resource_providers/{provider.id}/inventories")["inventories"]
    used = placement("GET", f"/resource_providers/{provider.id}/usages")["usages"]
    free = {rc: total[rc]["total"] - used.get(rc, 0) for rc in total if rc == SOLD}
    consumers = []
    try:
        for i in range(max(free.values(), default=0)):  # one GPU per consumer: max_unit is 1, as for a server
            consumers.append(str(uuid.uuid4()))
            booking = {
                "allocations": {provider.id: {"resources": {rc: 1 for rc, n in free.items() if n > i}}},
                "project_id": admin_conn.current_project_id, "user_id": admin_conn.current_user_id,
                "consumer_generation": None,
            }  # fmt: skip
            placement("PUT", f"/allocations/{consumers[-1]}", json=booking)
        yield
    finally:
        for consumer in consumers:
            placement("DELETE", f"/allocations/{consumer}")


def unnamed_volumes(conn) -> set[str]:
    return {v.id for v in conn.block_storage.volumes() if not v.name}


def scanning_project(tmp_path):
    project = make_project(tmp_path, f"t{uuid.uuid4().hex[:6]}")
    lines = [
        line
        for line in (project / "gpu-rent.vars").read_text().splitlines(keepends=True)
        if not line.startswith(("FLAVOR=", "FLAVOR_FALLBACK=", "POOL="))
    ]
    (project / "gpu-rent.vars").write_text(
        "".join(lines) + f"POOL={FULL}\nPOOL_FALLBACK={FREE}\nFLAVOR=gpu.a100.1\nFLAVOR_FALLBACK=gpu.a10.1\n"
    )
    return project


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, member_conn):
    """One project whose first up scans the pools; the tests follow its life in order."""
    project = scanning_project(tmp_path_factory.mktemp("scan"))
    ours = Ours(member_conn, project.name)
    yield project, ours
    gpu_rent(project, "destroy", "--i-understand-data-loss")
    assert ours.volumes() == {}


def test_the_first_up_rents_in_the_next_pool_and_makes_the_volumes_only_there(scanned, member_conn, admin_conn):
    project, ours = scanned
    unnamed_before = unnamed_volumes(member_conn)
    plan = gpu_rent(project, "dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"{FULL} or {FREE}" in plan.stdout

    with sold_out(admin_conn, FULL):
        result = gpu_rent(project, "up", "--yes", "--no-tunnel")
    assert result.returncode == 0, result.stderr

    [server] = ours.servers()
    assert server.availability_zone == FREE
    assert sorted(server.tags) == ["gpu-rent", "preemptible"]
    volumes = ours.volumes()
    assert sorted(volumes) == [f"{project.name}-boot", f"{project.name}-data"]
    boot, data = volumes[f"{project.name}-boot"], volumes[f"{project.name}-data"]
    for volume, mark in ((boot, "boot"), (data, "data")):
        assert volume.availability_zone == FREE and volume.volume_type == f"fast.{FREE}"
        assert volume.metadata.get("gpu-rent") == mark
        assert [a["server_id"] for a in volume.attachments] == [server.id]
    assert boot.is_bootable and boot.size == 10 and data.size == 4
    assert unnamed_volumes(member_conn) == unnamed_before  # nothing was left unnamed in the full pool
    # each failed attempt took an address while Nova tried to build it (fresh_server), and gave it back
    ports = [port.id for port in member_conn.network.ports(device_id=server.id)]
    assert [ip.port_id for ip in ours.floating_ips()] == ports

    saved = state(project)
    assert saved["pool"] == FREE and saved["flavor"] == "gpu.a10.1"
    assert saved["resources"]["boot_volume"] == boot.id and saved["resources"]["data_volume"] == data.id
    log = last_up_log(project)
    assert f"gpu.a100.1 in {FULL}" in log or "No valid host" in log


def test_volumes_pin_the_pool_even_when_the_first_pool_has_room_again(scanned):
    project, ours = scanned
    ids = {name: v.id for name, v in ours.volumes().items()}
    assert gpu_rent(project, "stop").returncode == 0
    assert ours.servers() == []

    again = gpu_rent(project, "up", "--yes", "--no-tunnel")  # ru-7a has room now, but the volumes live in ru-7b
    assert again.returncode == 0, again.stderr
    [server] = ours.servers()
    assert server.availability_zone == FREE
    assert {name: v.id for name, v in ours.volumes().items()} == ids
    report = json.loads(gpu_rent(project, "status", "--json").stdout)
    assert report["phase"] == "ready_cloud"


def test_a_pool_fallback_the_cloud_lacks_is_refused_before_anything_is_created(tmp_path, member_conn):
    project = scanning_project(tmp_path)
    text = (project / "gpu-rent.vars").read_text().replace(f"POOL_FALLBACK={FREE}", "POOL_FALLBACK=ru-9z")
    (project / "gpu-rent.vars").write_text(text)
    result = gpu_rent(project, "up", "--yes", "--no-tunnel")
    assert result.returncode == 2
    assert "POOL_FALLBACK: ru-9z: no such pool" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert Ours(member_conn, project.name).everything()["volumes"] == []
