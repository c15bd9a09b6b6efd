"""Day-one set-up of the ground cloud, idempotent.

    python -m gpu_rent_ground.seed catalog     # Keystone: services, endpoints, users
    python -m gpu_rent_ground.seed resources   # pools, flavors, image, external net, quotas

Settings come from the environment (never argv, so no password shows in ps):
GROUND_API_HOST, GROUND_SERVICE_PASSWORD, GROUND_ADMIN_PASSWORD,
GROUND_MEMBER_PASSWORD, GROUND_COMPUTES ("c1 c2"), GROUND_POOLS ("ru-7a ru-7b"),
GROUND_EXTERNAL_CIDR (the podman network of the target hosts).
"""

import ipaddress
import os
import sys
import time

import openstack

API_HOST = os.environ.get("GROUND_API_HOST", "127.0.0.1")
SERVICES = [  # name, type, url
    ("nova", "compute", f"http://{API_HOST}:8774/v2.1"),
    ("placement", "placement", f"http://{API_HOST}:8778"),
    ("glance", "image", f"http://{API_HOST}:9292"),
    ("neutron", "network", f"http://{API_HOST}:9696"),
    ("cinderv3", "block-storage", f"http://{API_HOST}:8776/v3"),
    ("cinder", "volumev3", f"http://{API_HOST}:8776/v3"),
]
SERVICE_USERS = ["nova", "placement", "glance", "neutron", "cinder"]
PROJECT = "gpu-rent"
MEMBER_USER = "gpu-rent-user"
IMAGE_NAME = "Debian 12 64-bit GPU optimized"
# (name, vcpus, ram MiB, disk GiB, extra specs). The preferred A100 flavor asks
# for a resource no compute offers, so it always ends in "No valid host";
# the fallbacks fit (each compute offers 4 L4 and 1 A10).
FLAVORS = [
    ("gpu.a100.1", 12, 98304, 0, {"resources:CUSTOM_GPU_A100": "1", "gpu:model": "A100-80GB", "gpu:count": "1"}),
    ("gpu.l4.1", 8, 32768, 0, {"resources:CUSTOM_GPU_L4": "1", "gpu:model": "L4-24GB", "gpu:count": "1"}),
    ("gpu.a10.1", 8, 32768, 0, {"resources:CUSTOM_GPU_A10": "1", "gpu:model": "A10-24GB", "gpu:count": "1"}),
    # fits a host but not the project's core quota (64): the cloud refuses it with "Quota exceeded"
    ("gpu.h100.8", 96, 65536, 0, {"resources:CUSTOM_GPU_L4": "1", "gpu:model": "H100-80GB", "gpu:count": "8"}),
    ("m1.small", 1, 2048, 0, {}),
]
QUOTAS_COMPUTE = {"instances": 10, "cores": 64, "ram": 262144}
QUOTAS_VOLUME = {"volumes": 40, "gigabytes": 1000, "snapshots": 20}
# room for a few projects side by side (tests, Molecule scenarios); a pool scan makes a router per pool
QUOTAS_NETWORK = {"floatingip": 10, "network": 20, "router": 12, "security_group": 30}


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"seed: {name} is not set")
    return value


def admin() -> openstack.connection.Connection:
    return openstack.connect(
        auth_url=f"http://{API_HOST}:5000/v3",
        username="admin",
        password=_env("GROUND_ADMIN_PASSWORD"),
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
    )


def _role(idc, name):
    return idc.find_role(name) or idc.create_role(name=name)


def catalog() -> None:
    idc = admin().identity
    domain = idc.find_domain("default")
    service_project = idc.find_project("service", domain_id=domain.id) or idc.create_project(
        name="service", domain_id=domain.id
    )
    admin_role, service_role, member_role = (_role(idc, n) for n in ("admin", "service", "member"))
    for name in SERVICE_USERS:
        user = idc.find_user(name, domain_id=domain.id) or idc.create_user(
            name=name, password=_env("GROUND_SERVICE_PASSWORD"), domain_id=domain.id
        )
        for role in (admin_role, service_role):
            idc.assign_project_role_to_user(service_project, user, role)
    for name, stype, url in SERVICES:
        service = next((s for s in idc.services() if s.type == stype), None) or idc.create_service(
            name=name, type=stype
        )
        present = {e.interface for e in idc.endpoints(service_id=service.id)}
        for interface in ("public", "internal", "admin"):
            if interface not in present:
                idc.create_endpoint(service_id=service.id, interface=interface, url=url, region_id="RegionOne")
    project = idc.find_project(PROJECT, domain_id=domain.id) or idc.create_project(
        name=PROJECT, domain_id=domain.id, description="gpu-rent test ground"
    )
    user = idc.find_user(MEMBER_USER, domain_id=domain.id) or idc.create_user(
        name=MEMBER_USER, password=_env("GROUND_MEMBER_PASSWORD"), domain_id=domain.id, default_project_id=project.id
    )
    idc.assign_project_role_to_user(project, user, member_role)


def _wait_for_computes(conn, hosts: list[str]) -> None:
    # Adding a host to an aggregate before its resource provider exists skips
    # the placement-aggregate mirror, and the AZ pre-filter then finds nothing.
    deadline = time.monotonic() + 240
    while True:
        hypervisors = {h.name for h in conn.compute.hypervisors()}
        up = {s.host for s in conn.compute.services() if s.binary == "nova-compute" and s.state == "up"}
        providers = {rp.name: rp for rp in conn.placement.resource_providers()}
        gpus_known = all(
            h in providers
            and any(
                i.resource_class == "CUSTOM_GPU_L4" for i in conn.placement.resource_provider_inventories(providers[h])
            )
            for h in hosts
        )
        if set(hosts) <= hypervisors and set(hosts) <= up and gpus_known:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"seed: computes not ready: hypervisors={hypervisors} up={up}")
        time.sleep(1)


def _wait_for_volume_backends(conn, pools: list[str]) -> None:
    # cinder-volume reports each pool's backend to the scheduler on its own periodic run: a volume asked
    # for before its pool's report fails ("AvailabilityZoneFilter removed all hosts"), seen in a CI run.
    deadline = time.monotonic() + 180
    wanted = {f"ground-{p}" for p in pools}
    while True:
        known = {p.name.rsplit("#", 1)[-1] for p in conn.block_storage.backend_pools()}
        if wanted <= known:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"seed: volume backends not reported to the scheduler: {sorted(wanted - known)}")
        time.sleep(1)


def resources() -> None:
    conn = admin()
    computes = os.environ.get("GROUND_COMPUTES", "c1 c2").split()
    pools = os.environ.get("GROUND_POOLS", "ru-7a ru-7b").split()
    hosts = [f"ground-{c}" for c in computes]
    _wait_for_computes(conn, hosts)
    for host, pool in zip(hosts, pools, strict=False):
        aggregate = conn.compute.find_aggregate(pool) or conn.compute.create_aggregate(
            name=pool, availability_zone=pool
        )
        if host not in (aggregate.hosts or []):
            conn.compute.add_host_to_aggregate(aggregate, host)
    for name, vcpus, ram, disk, specs in FLAVORS:
        if not conn.compute.find_flavor(name, ignore_missing=True):
            flavor = conn.compute.create_flavor(name=name, vcpus=vcpus, ram=ram, disk=disk, is_public=True)
            if specs:
                conn.compute.create_flavor_extra_specs(flavor, specs)
    for pool in pools:  # Selectel names volume types <tier>.<pool>
        for tier in ("fast", "universal"):
            name = f"{tier}.{pool}"
            if not conn.block_storage.find_type(name, ignore_missing=True):
                conn.block_storage.create_type(name=name, extra_specs={"volume_backend_name": f"ground-{pool}"})
    if not conn.image.find_image(IMAGE_NAME, ignore_missing=True):
        conn.image.create_image(
            name=IMAGE_NAME,
            data=b"\0" * 8192,
            disk_format="raw",
            container_format="bare",
            visibility="public",
            os_distro="debian",
            os_version="12",
            hw_qemu_guest_agent="yes",
        )
    _external_network(conn)
    project = conn.identity.find_project(PROJECT)
    conn.set_compute_quotas(project.id, **QUOTAS_COMPUTE)
    conn.set_volume_quotas(project.id, **QUOTAS_VOLUME)
    conn.set_network_quotas(project.id, **QUOTAS_NETWORK)
    _wait_for_volume_backends(conn, pools)


def _external_network(conn) -> None:
    cidr = ipaddress.ip_network(_env("GROUND_EXTERNAL_CIDR"))
    if conn.network.find_network("external", ignore_missing=True):
        return
    net = conn.network.create_network(
        name="external",
        is_router_external=True,
        provider_network_type="flat",
        provider_physical_network="public",
    )
    hosts = list(cidr.hosts())
    # .1 is the podman bridge (the ground's host side); floating IPs are
    # container addresses on that bridge, so SSH to one reaches a real sshd.
    conn.network.create_subnet(
        network_id=net.id,
        name="external-subnet",
        ip_version=4,
        cidr=str(cidr),
        gateway_ip=str(hosts[0]),
        is_dhcp_enabled=False,
        allocation_pools=[{"start": str(hosts[9]), "end": str(hosts[-5])}],
    )


if __name__ == "__main__":
    {"catalog": catalog, "resources": resources}[sys.argv[1]]()
