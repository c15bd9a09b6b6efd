"""A warm restart's server, asked for in up's lookup (plugins/modules/rental_lookup.py, or gpu-rent up's own
head start, gpu_rent/rental/up_head_start.py), in plain openstacksdk.

Every later `up` finds what the first made - both volumes, the pool's network, the security group, the key
pair - and no server (the idle-killer or `stop` deleted it). Nova then builds for 10 s on the test ground and
a minute or more on a real cloud, and up's roles spend that long again checking, one by one, what the lookup
found. When the lookup's own answers show that those roles will find nothing the create depends on to change
or refuse, the create is asked right there, and the build runs while they check; the server role's
fresh_server adopts the building server (created_early) and waits for it as for its own.

Kept apart from the module for the unit tests of the judgement (tests/unit/test_warm_start.py). Every create of a
rental's server goes through create_once here, the lookup's and fresh_server's alike (NO_RESEND_NOTES), and each
from kept volumes tells cloud-init to keep the host keys (USER_DATA_NOTES).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import time

# The scheduler found no room, the API refused the quota, or the pool is switched off: nothing was made.
NO_ROOM = re.compile(r"No valid host was found|[Qq]uota exceeded[^.\n]*|availability zone is not available")

# rental_lookup's warm_start option: what the server role would create, and what it checks before
WARM_START_OPTIONS = dict(
    pools=dict(type="list", elements="str", required=True),
    public_key=dict(required=True, no_log=False),
    tags=dict(type="list", elements="str", default=[]),
    metadata=dict(type="dict", default={}),
    floating_ip=dict(type="dict", options=dict(description=dict(required=True), keep=dict(type="bool", default=False))),
    reuse_only=dict(type="bool", default=False),
)


def _one(found: dict, name: str | None) -> dict | None:
    """The one thing of that name among the answers, or None for none or several."""
    listed = found.get(name) or [] if name else []
    return listed[0] if len(listed) == 1 else None


def why_not(found: dict, asked: dict) -> str | None:
    """Why the server may not be created before the roles run, or None when it may: every check the roles
    make before the server role's create (flavors.yml, keypair, volumes, network, security_group) would
    pass and change nothing the create takes. `asked` is rental_lookup's params, `found` its answers."""
    warm = asked["warm_start"]
    if warm["reuse_only"]:
        return "only an existing server may come back (the watchdog)"
    if found["servers"]:
        return "a server of this name exists"
    flavors = asked["flavors"] or []
    if not flavors or any(not found["flavors"].get(name) for name in flavors):
        return "a flavor was not found"  # flavors.yml refuses any of them missing
    key = found["keypair"] or {}
    if (key.get("public_key") or "").split()[:2] != warm["public_key"].split()[:2]:
        return "the key pair is missing or differs"  # the keypair role replaces it: the create must take the new
    boot, data = (_one(found["volumes"], name) for name in (asked["volumes"] or [None, None])[:2])
    if boot is None or data is None:
        return "the volumes are not there, one each"
    if boot["status"] != "available" or data["status"] != "available":
        return "a volume is not available"
    pool = boot["availability_zone"]
    if data["availability_zone"] != pool or pool not in warm["pools"]:
        return "the volumes are not in one pool of the settings"
    at = warm["pools"].index(pool)
    names = {key: (asked[key] or [])[at : at + 1] for key in ("networks", "subnets", "routers")}
    if any(not name or _one(found[key], name[0]) is None for key, name in names.items()):
        return f"the network, subnet or router of {pool} is not there, one each"
    if len(found["external_networks"]) != 1:
        return "not exactly one external network"
    if len(found["security_groups"]) != 1:
        return "not exactly one security group"
    return None


# NO_RESEND_NOTES: openstacksdk asks keystoneauth to send any request once more after a dropped connection
# (openstack/proxy.py Proxy.request, connect_retries=1), a POST too. A `POST /servers` that Nova took before the
# connection dropped (a lid closed mid-request, a flaky link) is then sent again: a second server, never armed,
# whose volumes on a cold create Nova made and nobody named (tests/unit/test_create_once.py shows the SDK do it).
# A create here goes out once; after a drop, or a gateway's 502/503/504 (Nova behind it may have taken it), the
# server of its name is looked for, as Nova lists a server from the moment it took the create (its build request).
DROP_LOOKS = (1.0, 2.0, 4.0)  # seconds before each look for the server of the name after a dropped create
GATEWAY_ERRORS = (502, 503, 504)

# USER_DATA_NOTES: what cloud-init is told at a create from kept volumes. gpu-rent pins a boot volume's host keys
# (gpu_rent/to_vm/ssh.py); cloud-init deletes and remakes the host keys once per instance by default (cc_ssh,
# ssh_deletekeys), so every new server from a kept boot volume would answer with new keys, and up would refuse
# it as another machine. Not at the create that makes the boot volume from the image: there cloud-init's
# default makes the volume's own keys (with ssh_deletekeys false it would keep any an image shipped, the same
# on every customer's volume).
KEEP_HOST_KEYS = """#cloud-config
# gpu-rent: the boot volume outlives its server; its host keys, pinned per boot volume, stay with it
ssh_deletekeys: false
"""
KEEP_HOST_KEYS_USER_DATA = base64.b64encode(KEEP_HOST_KEYS.encode()).decode()  # Nova takes user data base64


class DroppedCreate(Exception):
    """The create's answer was lost, and whether Nova made the server could not be told, or it made none."""

    def __init__(self, said: str, made_none: bool = False):
        super().__init__(said)
        self.made_none = made_none  # Nova listed no server of the name since: what was made for it may go


def scrubbed(text: str, metadata: dict) -> str:
    """An error's words without what the create carried (Nova's validation errors echo the body refused): each
    metadata value, and each string inside one that is JSON (the killer's credential and its secret)."""
    for value in metadata.values():
        parts = [str(value)]
        try:
            inner = json.loads(value)
            parts += [v for v in inner.values() if isinstance(v, str)] if isinstance(inner, dict) else []
        except (TypeError, ValueError):
            pass
        for part in sorted(parts, key=len, reverse=True):
            if len(part) >= 8:
                text = text.replace(part, "********")
    return text


def named_servers(compute, name: str) -> list:
    """The servers of exactly this name, but a DELETED one (listed a few seconds after a stop ended at it).
    Nova's name filter is a regex: a rental's name (a-z, 0-9, -) holds no special character, and each is checked."""
    return [s for s in compute.servers(name=f"^{name}$") if s.name == name and s.status != "DELETED"]


def create_once(conn, **attrs):
    """compute.create_server(**attrs), the POST sent once (NO_RESEND_NOTES); after a dropped connection or a
    gateway's error, the server of that name Nova took, or DroppedCreate in words."""
    from keystoneauth1 import exceptions as ks_exceptions
    from openstack import exceptions as sdk_exceptions

    once = copy.copy(conn.compute)  # a proxy of this create's own: no other caller's requests change
    plain = once.request

    def request(url, method, *args, **kwargs):
        if method.upper() == "POST":
            kwargs["connect_retries"] = 0
        return plain(url, method, *args, **kwargs)

    once.request = request
    try:
        return once.create_server(**attrs)
    except ks_exceptions.ConnectionError as e:
        lost = " ".join(str(e).split())[:300]
    except sdk_exceptions.HttpException as e:
        if e.status_code not in GATEWAY_ERRORS:
            raise
        lost = f"HTTP {e.status_code} from before Nova"
    name = attrs["name"]
    looked = False
    for pause in DROP_LOOKS:
        time.sleep(pause)
        try:
            named = named_servers(conn.compute, name)
        except (ks_exceptions.ConnectionError, sdk_exceptions.SDKException):
            continue
        looked = True
        if len(named) == 1:
            return named[0]
        if named:
            raise DroppedCreate(f"the answer to the create of server {name} was lost ({lost}), and "
                                f"{len(named)} servers have that name: {', '.join(s.id for s in named)}")  # fmt: skip
    if looked:
        raise DroppedCreate(
            f"the answer to the create of server {name} was lost ({lost}), and no server of that name was listed "
            f"{sum(DROP_LOOKS):.0f} s later: Nova made none, and the create was not sent again (run up again)",
            made_none=True,
        )
    raise DroppedCreate(
        f"the answer to the create of server {name} was lost ({lost}), and Nova could not be asked since whether it "
        "made it: `gpu-rent status` shows it, `gpu-rent up` goes on with it, `gpu-rent stop` ends it"
    )


def existing(volume_id: str, boot_index: int) -> dict:
    """A volume the server boots from or attaches, kept when the server is deleted."""
    return {
        "boot_index": boot_index,
        "uuid": volume_id,
        "source_type": "volume",
        "destination_type": "volume",
        "delete_on_termination": False,
    }


def project_address(network, listed: list, network_id: str, description: str) -> tuple:
    """(the project's floating IP, whether made here): of those listed under its description, one on a
    port (a server's, kept from before) before a free one; none listed, a new one on network_id.
    listed holds dicts (the lookup's) or openstacksdk resources (fresh_server's), read alike."""
    ordered = sorted(listed, key=lambda ip: ip["port_id"] is None)
    if ordered:
        return ordered[0], False
    return network.create_ip(floating_network_id=network_id, description=description), True


def start(conn, found: dict, asked: dict, sdk_exceptions, carry=None) -> dict:
    """rental_lookup's `early` answer: the server asked for (and the project's address taken), or why not.

    carry(floating_ip_id) -> (metadata, said): the killer's credential the create carries (the caller's
    gpu_rent_killer_handoff.for_create, CREATE_NOTES there), made after the address it names; None: none."""
    why = why_not(found, asked)
    if why:
        return {"created": False, "why": why}
    warm = asked["warm_start"]
    boot, data = (found["volumes"][name][0] for name in asked["volumes"][:2])
    pool = boot["availability_zone"]
    network = found["networks"][asked["networks"][warm["pools"].index(pool)]][0]
    flavor = found["flavors"][asked["flavors"][0]][0]
    early = {}
    address, made = None, False
    spec = warm["floating_ip"]
    if spec:  # before the create, which names it to its killer (fresh_server takes it the same way)
        try:
            address, made = project_address(
                conn.network, found["floating_ips"], found["external_networks"][0]["id"], spec["description"]
            )
            early["floating_ip"] = address.to_dict(computed=False) if made else address
        except sdk_exceptions.SDKException as e:  # fresh_server takes one, or the floating_ip role
            early["floating_ip_error"] = " ".join(str(e).split())[:300]
    metadata, carried = {}, {}
    if carry is not None:
        kept = address is None or spec["keep"]
        metadata, carried = carry(None if kept else address["id"])
        early["killer_at_create"] = carried
    try:
        server = create_once(
            conn,
            name=asked["server"],
            flavor_id=flavor["id"],
            availability_zone=pool,
            networks=[{"uuid": network["id"]}],
            security_groups=[{"name": found["security_groups"][0]["id"]}],
            key_name=asked["keypair"],
            tags=warm["tags"],
            metadata={**warm["metadata"], **metadata},
            block_device_mapping=[existing(boot["id"], 0), existing(data["id"], -1)],
            user_data=KEEP_HOST_KEYS_USER_DATA,
        )
    except sdk_exceptions.HttpException as e:  # nothing was created: the server role meets it again, in words
        said = NO_ROOM.search(str(e))
        _undo(conn, address if made else None, carried)
        return {"created": False, "why": said.group(0) if said else " ".join(scrubbed(str(e), metadata).split())[:300]}
    except DroppedCreate as e:  # the server role looks for it by name, and creates it if still none
        if e.made_none:
            _undo(conn, address if made else None, carried)
        return {"created": False, "why": str(e)}
    except Exception:  # never sent (no endpoint, a refusal of the SDK's own): nothing was created
        _undo(conn, address if made else None, carried)
        raise
    created = server.to_dict(computed=False)
    created.pop("admin_password", None)  # Nova's adminPass of the create's answer: a secret, of no use here
    for key in metadata:  # the carried secret: never in an answer (module results are printed at -v)
        (created.get("metadata") or {}).pop(key, None)
    return {"created": True, "why": "", "server": created, "flavor": asked["flavors"][0], **early}


def drop(conn, carried: dict) -> None:
    """Delete the killer's credential a create carried (carried: what for_create returned of it) when that create
    made no server, or its server is gone: nothing is left for it to delete. Here, for both creates."""
    if carried.get("handed"):
        conn.identity.delete_application_credential(conn.session.get_user_id(), carried["id"])


def _undo(conn, made_address, carried: dict) -> None:
    """A create refused: the address made for it and the credential it carried go (fresh_server's _undo)."""
    if made_address is not None:
        conn.network.delete_ip(made_address, ignore_missing=True)
    drop(conn, carried)
