"""When up's lookup may ask for a warm restart's server before the roles check (module_utils/gpu_rent_warm_start.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.module_file import load

warm = load(
    "gpu_rent_warm_start", Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "gpu_rent_warm_start.py"
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey"
ASKED = {
    "server": "p1",
    "flavors": ["gpu.l4.1", "gpu.a10.1"],
    "keypair": "p1-key",
    "volumes": ["p1-boot", "p1-data"],
    "networks": ["p1-net-ru-7a", "p1-net-ru-7b"],
    "subnets": ["p1-subnet-ru-7a", "p1-subnet-ru-7b"],
    "routers": ["p1-router-ru-7a", "p1-router-ru-7b"],
    "security_group": "p1-ssh",
    "warm_start": {
        "pools": ["ru-7a", "ru-7b"],
        "public_key": KEY + " me@laptop",
        "tags": ["gpu-rent", "preemptible"],
        "metadata": {"gpu-rent": "p1"},
        "floating_ip": {"description": "gpu-rent p1", "keep": False},
        "reuse_only": False,
    },
}


def _found(pool: str = "ru-7b") -> dict:
    """The answers of a warm restart: the volumes in the fallback pool, everything else there once."""
    return {
        "servers": [],
        "flavors": {"gpu.l4.1": [{"id": "f1"}], "gpu.a10.1": [{"id": "f2"}]},
        "keypair": {"name": "p1-key", "public_key": KEY + " gpu-rent-ground-user"},
        "volumes": {
            "p1-boot": [{"id": "b", "status": "available", "availability_zone": pool}],
            "p1-data": [{"id": "d", "status": "available", "availability_zone": pool}],
        },
        "networks": {f"p1-net-{pool}": [{"id": "n"}]},
        "subnets": {f"p1-subnet-{pool}": [{"id": "s"}]},
        "routers": {f"p1-router-{pool}": [{"id": "r"}]},
        "external_networks": [{"id": "ext"}],
        "security_groups": [{"id": "sg"}],
        "floating_ips": [],
    }


def test_a_warm_restart_may_start_at_once_whatever_the_keys_comment():
    assert warm.why_not(_found(), ASKED) is None
    assert warm.why_not(_found("ru-7a"), ASKED) is None


def _broken(change) -> dict:
    found = copy.deepcopy(_found())
    change(found)
    return found


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda f: f["servers"].append({"id": "x", "status": "SHELVED_OFFLOADED"}), "a server of this name exists"),
        (lambda f: f["flavors"].update({"gpu.a10.1": []}), "a flavor"),  # flavors.yml refuses a fallback missing
        (lambda f: f.update(keypair=None), "key pair"),
        (lambda f: f["keypair"].update(public_key="ssh-ed25519 AAAAother x"), "key pair"),  # replaced after
        (lambda f: f["volumes"].update({"p1-data": []}), "volumes"),
        (lambda f: f["volumes"]["p1-boot"].append({"id": "b2", "status": "available", "availability_zone": "ru-7b"}),
         "volumes"),
        (lambda f: f["volumes"]["p1-data"][0].update(status="in-use"), "not available"),
        (lambda f: f["volumes"]["p1-data"][0].update(status="reserved"), "not available"),  # a shelved server's
        (lambda f: f["volumes"]["p1-data"][0].update(availability_zone="ru-7a"), "one pool"),
        (lambda f: [v[0].update(availability_zone="ru-9z") for v in f["volumes"].values()], "one pool"),
        (lambda f: f["routers"].update({"p1-router-ru-7b": []}), "network, subnet or router of ru-7b"),
        (lambda f: f["subnets"]["p1-subnet-ru-7b"].append({"id": "s2"}), "network, subnet or router"),
        (lambda f: f["external_networks"].append({"id": "ext2"}), "external network"),
        (lambda f: f.update(security_groups=[]), "security group"),
    ],
)  # fmt: skip
def test_anything_a_role_would_change_or_refuse_leaves_the_create_to_the_roles(change, why):
    said = warm.why_not(_broken(change), ASKED)
    assert said is not None and why in said, said


def test_the_watchdog_never_rents_anew_early():
    asked = copy.deepcopy(ASKED)
    asked["warm_start"]["reuse_only"] = True
    assert "watchdog" in warm.why_not(_found(), asked)


def test_a_volume_kept_on_delete_is_mapped_as_the_server_roles_create_maps_it():
    assert warm.existing("b", 0) == {
        "boot_index": 0, "uuid": "b", "source_type": "volume", "destination_type": "volume",
        "delete_on_termination": False,
    }  # fmt: skip


def test_the_create_is_not_asked_when_the_roles_must_go_first():
    class Refuse:  # any call on it fails the test: nothing may be asked of the cloud
        def __getattr__(self, name):
            raise AssertionError(f"asked the cloud for {name}")

    assert warm.start(Refuse(), _broken(lambda f: f.update(security_groups=[])), ASKED, None) == {
        "created": False, "why": "not exactly one security group",
    }  # fmt: skip


class _Network:
    """Neutron as project_address meets it: it records the addresses it is asked to make."""

    def __init__(self):
        self.made: list[dict] = []

    def create_ip(self, **asked):
        self.made.append(asked)
        return {"id": "new", "port_id": None, **asked}


@pytest.mark.parametrize(
    ("listed", "taken"),
    [
        ([{"id": "free", "port_id": None}, {"id": "on-port", "port_id": "p"}], "on-port"),  # a server's, kept
        ([{"id": "free", "port_id": None}], "free"),
    ],
)
def test_the_projects_address_is_taken_on_a_port_first_then_free(listed, taken):
    network = _Network()
    address, made = warm.project_address(network, listed, "ext", "gpu-rent p1")
    assert address["id"] == taken and not made
    assert network.made == []


def test_the_projects_address_is_made_on_the_external_network_when_none_is_listed():
    network = _Network()
    address, made = warm.project_address(network, [], "ext", "gpu-rent p1")
    assert made and address["id"] == "new"
    assert network.made == [{"floating_network_id": "ext", "description": "gpu-rent p1"}]


def test_the_projects_address_is_read_alike_from_openstacksdk_resources():
    from openstack.network.v2.floating_ip import FloatingIP  # fresh_server lists these, the lookup dicts

    listed = [FloatingIP(id="free", port_id=None), FloatingIP(id="on-port", port_id="p")]
    address, made = warm.project_address(_Network(), listed, "ext", "gpu-rent p1")
    assert address.id == "on-port" and not made


class _Cloud:
    """Nova, Neutron and Keystone as an early create meets them, each call recorded in order; refuse: Nova's
    words of a refusal, or an exception the create raises."""

    def __init__(self, refuse: str | Exception | None = None):
        from openstack.compute.v2.server import Server
        from openstack.network.v2.floating_ip import FloatingIP

        self.calls: list[tuple] = []
        cloud = self

        class Compute:
            def request(self, *args, **kwargs):  # create_once wraps it; the fake's create never calls it
                raise AssertionError("no raw request expected")

            def create_server(self, **attrs):
                cloud.calls.append(("create", attrs))
                if isinstance(refuse, Exception):
                    raise refuse
                if refuse:
                    from openstack import exceptions

                    raise exceptions.HttpException(message=refuse, http_status=400)
                return Server(id="s1", name=attrs["name"], metadata=dict(attrs["metadata"]), status="BUILD")

        class Network:
            def create_ip(self, **asked):
                cloud.calls.append(("address", asked))
                return FloatingIP(id="new-ip", port_id=None, **asked)

            def delete_ip(self, address, ignore_missing):
                cloud.calls.append(("address deleted", address.id))

        class Identity:
            def delete_application_credential(self, user, credential_id):
                cloud.calls.append(("credential deleted", credential_id))

        self.compute, self.network, self.identity = Compute(), Network(), Identity()
        self.session = type("Session", (), {"get_user_id": staticmethod(lambda: "u")})()

    def carry(self, floating_ip_id):
        self.calls.append(("credential", floating_ip_id))
        return {"gpu_rent_killer": '{"c":"cid","k":"the-secret"}'}, {"handed": True, "id": "cid", "name": "n-create"}


def test_the_early_create_carries_the_killers_credential_naming_the_address_taken_before_it():
    """Nova takes no metadata while it builds: the credential goes in the create, so a laptop lost during the
    build leaves a server its killer can delete; the address is taken first, for the credential names it."""
    from openstack import exceptions

    cloud = _Cloud()
    early = warm.start(cloud, _found(), ASKED, exceptions, cloud.carry)
    assert [c[0] for c in cloud.calls] == ["address", "credential", "create"]
    assert cloud.calls[1] == ("credential", "new-ip")
    assert cloud.calls[2][1]["metadata"] == {"gpu-rent": "p1", "gpu_rent_killer": '{"c":"cid","k":"the-secret"}'}
    assert early["created"] and early["killer_at_create"]["id"] == "cid"
    assert "the-secret" not in str(early)  # the answer is printed at -v and handed to up.yml as a file
    assert early["server"]["metadata"] == {"gpu-rent": "p1"}


def test_a_kept_address_is_not_named_and_a_refused_create_takes_back_what_was_made_for_it():
    from openstack import exceptions

    kept = copy.deepcopy(ASKED)
    kept["warm_start"]["floating_ip"]["keep"] = True
    cloud = _Cloud()
    warm.start(cloud, _found(), kept, exceptions, cloud.carry)
    assert ("credential", None) in cloud.calls  # KEEP_FLOATING_IP: the killer never deletes it
    cloud = _Cloud(refuse="Quota exceeded for instances")
    early = warm.start(cloud, _found(), ASKED, exceptions, cloud.carry)
    assert early == {"created": False, "why": "Quota exceeded for instances"}
    assert cloud.calls[-2:] == [("address deleted", "new-ip"), ("credential deleted", "cid")]


def test_a_create_never_sent_or_whose_drop_made_none_takes_back_what_was_made_for_it_and_says_no_secret():
    from openstack import exceptions

    undone = [("address deleted", "new-ip"), ("credential deleted", "cid")]
    cloud = _Cloud(refuse=warm.DroppedCreate("lost; Nova made none", made_none=True))
    assert warm.start(cloud, _found(), ASKED, exceptions, cloud.carry)["created"] is False
    assert cloud.calls[-2:] == undone
    cloud = _Cloud(refuse=warm.DroppedCreate("lost; Nova could not be asked"))  # it may exist: its killer needs both
    warm.start(cloud, _found(), ASKED, exceptions, cloud.carry)
    assert cloud.calls[-1][0] == "create"
    cloud = _Cloud(refuse=exceptions.EndpointNotFound("no compute endpoint"))
    with pytest.raises(exceptions.EndpointNotFound):
        warm.start(cloud, _found(), ASKED, exceptions, cloud.carry)
    assert cloud.calls[-2:] == undone
    # Nova's validation errors echo the body refused: the carried credential never in the words kept
    cloud = _Cloud(refuse="Invalid input for field/attribute server. Value: {'metadata': {'gpu_rent_killer': "
                          "'{\"c\":\"cid\",\"k\":\"the-secret\"}'}}")  # fmt: skip
    why = warm.start(cloud, _found(), ASKED, exceptions, cloud.carry)["why"]
    assert "the-secret" not in why and "Invalid input" in why, why
