"""Facts of the ground's OpenStack that gpu-rent relies on, as the member user."""

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from openstack import exceptions as os_exc

from tests.groundkit import CLOUDS_YAML, POOL, connect


def test_member_user_is_not_admin(member_conn):
    roles = member_conn.session.auth.get_access(member_conn.session).role_names
    assert "admin" not in roles and "member" in roles
    with pytest.raises(os_exc.ForbiddenException):
        list(member_conn.compute.hypervisors())


def test_a_members_token_never_carries_roles_of_an_admin_request_beside_it(member_conn):
    """Keystone keeps a request-local cache on oslo.context's current context: served by threads
    (gunicorn gthread) a member's application credential was asked with `admin` from an admin request
    on the same worker (35 of 60 refused with RoleAssignmentNotFound; CI's idle-killer failed so).
    The ground serves Keystone by processes (ground/ext/gpu_rent_ground/serve.py)."""
    done = threading.Event()

    def admin_noise():
        admin = connect("ground-admin")
        while not done.is_set():
            list(admin.identity.role_assignments(effective=True))
            list(admin.compute.servers(all_projects=True))

    def make_and_drop(_):
        conn = connect("ground")
        cred = conn.identity.create_application_credential(conn.current_user_id, name=f"t-roles-{uuid.uuid4().hex[:8]}")
        conn.identity.delete_application_credential(conn.current_user_id, cred.id)
        return sorted(r["name"] for r in cred.roles)

    with ThreadPoolExecutor(7) as pool:
        noise = [pool.submit(admin_noise) for _ in range(3)]
        try:
            made = list(pool.map(make_and_drop, range(24)))
        finally:
            done.set()
        for n in noise:
            n.result()
    assert made == [["member", "reader"]] * 24


def test_boot_volume_from_image_is_bootable_and_data_volume_is_empty(cloud):
    boot = cloud.volume(10, image=True)
    data = cloud.volume(4)
    assert boot.is_bootable is True
    assert boot.availability_zone == POOL and boot.volume_type == f"fast.{POOL}"
    assert data.is_bootable is False and data.size == 4


def test_server_boots_from_existing_volume_with_data_volume_at_create(cloud, net):
    boot, data = cloud.volume(10, image=True), cloud.volume(4)
    server = cloud.server(net, boot, data, tags=["gpu-rent", "preemptible"])
    assert server.status == "ACTIVE"
    assert sorted(server.tags) == ["gpu-rent", "preemptible"]
    assert server.availability_zone == POOL
    # microversion 2.79 shows delete_on_termination per attachment
    attachments = cloud.conn.compute.get(f"/servers/{server.id}/os-volume_attachments", microversion="2.79").json()
    by_volume = {a["volumeId"]: a for a in attachments["volumeAttachments"]}
    assert set(by_volume) == {boot.id, data.id}
    assert min(by_volume.values(), key=lambda a: a["device"])["volumeId"] == boot.id  # boot volume is the root disk
    assert all(a["delete_on_termination"] is False for a in by_volume.values())
    assert not (server.image or {}).get("id")  # no image: it booted from the volume


def test_preferred_flavor_has_no_valid_host_and_the_fallback_fits(cloud, net):
    boot = cloud.volume(10, image=True)
    failed = cloud.server(net, boot, flavor="gpu.a100.1", wait=False)
    failed = cloud.conn.compute.wait_for_server(failed, status="ERROR", failures=["ACTIVE"], wait=60)
    assert "No valid host" in failed.fault["message"]
    # an ERROR server keeps its volume reserved until it is deleted
    cloud.delete_server(failed.id)
    cloud.conn.block_storage.wait_for_status(boot, "available", wait=60)
    fallback = cloud.server(net, boot, flavor="gpu.l4.1")
    assert fallback.status == "ACTIVE"
    assert cloud.conn.compute.find_flavor("gpu.l4.1").extra_specs["gpu:model"] == "L4-24GB"


def test_snapshot_of_the_in_use_boot_volume(cloud, net):
    boot = cloud.volume(10, image=True)
    cloud.server(net, boot)
    snap = cloud.conn.block_storage.create_snapshot(volume_id=boot.id, name="gpu-rent-boot-ok", force=True)
    snap = cloud.conn.block_storage.wait_for_status(snap, "available", failures=["error"], wait=60)
    assert snap.volume_id == boot.id and snap.size == 10

    def drop_snapshot_first():  # a volume with snapshots cannot be deleted
        cloud.conn.block_storage.delete_snapshot(snap, ignore_missing=True)
        cloud.conn.block_storage.wait_for_delete(snap, wait=60)

    cloud.later(drop_snapshot_first)


def test_clouds_yaml_names_both_clouds(member_conn):
    text = CLOUDS_YAML.read_text()
    assert "  ground:\n" in text and "  ground-admin:\n" in text
    assert CLOUDS_YAML.stat().st_mode & 0o077 == 0
