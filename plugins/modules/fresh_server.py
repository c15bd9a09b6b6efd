#!/usr/bin/python
"""Ansible module: a rental's server, creating its two volumes only where it is placed, or from them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: fresh_server
short_description: Create a rental's server together with its boot and data volumes, or from them
description:
  - Creates a server whose block-device mappings make the boot volume (from an image) and the blank
    data volume, both with delete_on_termination false, in the server's pool.
  - The cloud creates the volumes only after the scheduler has placed the server, so a pool or flavor
    without room ("No valid host") or a refused quota leaves nothing behind. This is what lets up scan
    pools while no volume pins one.
  - On success, and after any failure that got as far as making volumes, the volumes are named and
    marked so that no billable volume is left unnamed. A failed server is deleted; its volumes stay.
  - A server of that name that already exists (an up interrupted while waiting) is adopted - waited
    for, and its volumes named; it is never re-created. A DELETED one (listed a few seconds after a
    stop) is passed over, as rental_lookup does.
  - With I(volumes_exist), every later up - the server boots from the two volumes of that name, and
    nothing is made but the server. It is waited for at a 0.5 s poll; openstack.cloud.server waits
    through openstacksdk's wait_for_server, which polls every 5 s, and a warm up paid most of that.
    The flavor, the network and the volumes are found side by side before the create.
  - The create is sent once (openstacksdk would send it again after a dropped connection); after a drop the
    server of that name is adopted, or the module fails in words (none made, or not known).
  - A server from kept volumes is told (user data) to keep its boot volume's host keys, which up pins.
  - With I(first_boot), a create from the image carries as its user data the idle-killer's installer, which
    cloud-init runs at the server's first boot (module_utils/gpu_rent_first_boot.py); one over Nova's 65535 bytes
    fails in one line before anything is made.
  - The server's port is returned, so the floating IP is attached without a lookup of its own.
  - With I(created_early), a server of that name found is the one up's lookup asked for moments ago
    (rental_lookup's warm_start); it is adopted as above, and reported as made by this up.
  - With I(floating_ip), the project's address (found by its description, else made) is taken before
    the create (beside the flavor's and network's lookups; the create's killer credential names it) and
    attached once the server is ACTIVE, as openstack.cloud.server's floating_ips would; the floating_ip
    role's own two tasks after the build cost a warm up 2 s of about 33 on the ground. An address made
    here, or a free one not I(keep)s, is released when the server does not come up. When Neutron refuses
    the address the server is still waited for and its volumes named, and it is returned without one (a
    warning says why); the floating_ip role then takes the address itself.
options:
  name: {description: Server name., required: true, type: str}
  flavor: {description: Flavor name or id., required: true, type: str}
  image: {description: Image the boot volume is made from (required unless I(volumes_exist))., type: str}
  volumes_exist:
    description: The boot and data volumes exist (found by name); the server boots from them.
    type: bool
    default: false
  pool: {description: Availability zone of the server and its volumes., required: true, type: str}
  network: {description: Network name or id., required: true, type: str}
  security_group: {description: Security group name., required: true, type: str}
  key_name: {description: Key pair name., required: true, type: str}
  boot_volume: {description: "Boot volume: name, and size (GiB) and metadata when made.", required: true, type: dict}
  data_volume: {description: "Data volume: name, and size (GiB) and metadata when made.", required: true, type: dict}
  volume_type: {description: Volume type of both volumes; null takes the cloud's default., type: str}
  tags: {description: Server tags., type: list, elements: str, default: []}
  metadata: {description: Server metadata., type: dict, default: {}}
  floating_ip:
    description: "The project's floating IP to attach: its description (the mark) and the external network's id."
    type: dict
    suboptions:
      description: {description: Description that marks the address as the project's., type: str, required: true}
      network_id: {description: Id of the external network a new address comes from., type: str, required: true}
      keep: {description: "A free address of the project outlives a server that did not come up.", type: bool}
  created_early:
    description: A server of this name found was created by this up's lookup (rental_lookup's warm_start).
    type: bool
    default: false
  killer:
    description:
      - "The idle-killer's credential, made as soon as a server made here (or by up's lookup, I(created_early))
        is ACTIVE and handed to it as its metadata (module_utils/gpu_rent_killer_handoff.py): the credential
        name, days, rule_path."
      - "A create made here carries one in its metadata from the start, for the build (CREATE_NOTES there),
        which the server's own replaces at ACTIVE."
    type: dict
    suboptions:
      name: {description: The project folder's credential name., type: str, required: true}
      days: {description: Days the credential lives., type: int, default: 7}
      rule_path: {description: "Access rule path; default: the compute endpoint's path + /servers/<id>.", type: str}
  first_boot:
    description:
      - "What cloud-init installs at the first boot of a server made from the image (the idle_killer role's
        first_boot.yml renders it): the on_vm package and the killer's units, a config that names no server yet,
        the units started. No secret: the killer takes its credential from the metadata service."
      - "For a boot volume never booted: made by this create (I(volumes_exist) false), or from the image by the
        volumes role just before (a one-pool project's first up). A kept boot volume holds its killer already."
    type: dict
    suboptions:
      program_dir: {description: The folder the on_vm package goes into., type: str, required: true}
      files: {description: "Each file's path on the VM and its content (mode 0644).", type: dict, required: true}
      config_file: {description: The killer's config (written 0600 unless one is there)., type: str, required: true}
      config: {description: The first boot's config (JSON)., type: str, required: true}
      start: {description: The units enabled and started., type: list, elements: str, required: true}
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
placed: {description: Whether the server is ACTIVE., returned: always, type: bool}
pool: {description: Pool the server is in., returned: when placed, type: str}
reason: {description: Why the cloud did not place the server (no room, quota)., returned: when not placed, type: str}
server: {description: The server., returned: when placed, type: dict}
ports: {description: "The server's ports (port_info's list).", returned: when placed, type: list}
floating_ip: {description: The floating IP attached., returned: when placed with I(floating_ip), type: dict}
boot_volume: {description: Id of the boot volume., returned: when volumes were made, type: str}
data_volume: {description: Id of the data volume., returned: when volumes were made, type: str}
killer:
  description: "The idle-killer's credential handed (id, name, expires_at, access_rules, handed, seconds; never its
    secret), or handed false and why."
  returned: when placed with I(killer) and the server was created here or by up's lookup
  type: dict
killer_at_create:
  description: "The credential the create carried (as I(killer) returns it; server_id *), or handed false and why."
  returned: when the create was made here with I(killer)
  type: dict
"""

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule

# NO_ROOM: the scheduler found no room, the API refused the quota, or the pool is switched off - nothing
# was made, try elsewhere. As a collection's module, or (playbooks/library in a direct run) with
# playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_first_boot import (
        FIRST_BOOT_OPTIONS,
        too_big,
        user_data,
    )
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_killer_handoff import (
        KILLER_OPTIONS,
        for_create,
        make_and_hand,
    )
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_lookup import without_handoff
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_warm_start import (
        KEEP_HOST_KEYS_USER_DATA,
        NO_ROOM,
        DroppedCreate,
        create_once,
        drop,
        existing,
        named_servers,
        project_address,
        scrubbed,
    )
except ImportError:
    from ansible.module_utils.gpu_rent_first_boot import FIRST_BOOT_OPTIONS, too_big, user_data
    from ansible.module_utils.gpu_rent_killer_handoff import KILLER_OPTIONS, for_create, make_and_hand
    from ansible.module_utils.gpu_rent_lookup import without_handoff
    from ansible.module_utils.gpu_rent_warm_start import (
        KEEP_HOST_KEYS_USER_DATA,
        NO_ROOM,
        DroppedCreate,
        create_once,
        drop,
        existing,
        named_servers,
        project_address,
        scrubbed,
    )


def create_user_data(volumes_exist: bool, first_boot: dict | None) -> tuple[str | None, str | None]:
    """(the create's user data, base64, or None; why the create may not be sent, or None). A boot volume never
    booted, made from the image here or by the volumes role just before (first_boot given): the killer's installer,
    with cloud-init's default host keys (the volume's own). From kept volumes: keep their host keys
    (USER_DATA_NOTES), the killer is on them."""
    if first_boot:
        encoded = user_data(first_boot)
        return encoded, too_big(encoded)
    return (KEEP_HOST_KEYS_USER_DATA if volumes_exist else None), None


def released(made: bool, keep: bool, attached: bool) -> bool:
    """Whether the address taken for a server that did not come up goes: one made for it always; one found
    free (left by an up killed while its server built) unless KEEP_FLOATING_IP keeps it; never one on a port."""
    return made or not (keep or attached)


class FreshServerModule(OpenStackModule):
    argument_spec = dict(  # noqa: RUF012 - the base class reads it as a class attribute
        name=dict(required=True),
        flavor=dict(required=True),
        image=dict(),
        volumes_exist=dict(type="bool", default=False),
        pool=dict(required=True),
        network=dict(required=True),
        security_group=dict(required=True),
        key_name=dict(required=True, no_log=False),
        boot_volume=dict(required=True, type="dict"),
        data_volume=dict(required=True, type="dict"),
        volume_type=dict(),
        tags=dict(type="list", elements="str", default=[]),
        metadata=dict(type="dict", default={}),
        floating_ip=dict(
            type="dict",
            options=dict(
                description=dict(required=True), network_id=dict(required=True), keep=dict(type="bool", default=False)
            ),
        ),
        created_early=dict(type="bool", default=False),
        killer=dict(type="dict", options=KILLER_OPTIONS),
        first_boot=dict(type="dict", options=FIRST_BOOT_OPTIONS),
    )

    def run(self):
        p = self.params
        if not p["volumes_exist"] and not p["image"]:  # the base class passes no required_if on
            self.fail_json(msg="image is required when the create makes the volumes (volumes_exist false)")
        # before anything is made or looked up: a create Nova would refuse must leave no address, no credential
        data, refused = create_user_data(p["volumes_exist"], p["first_boot"])
        if refused:
            self.fail_json(msg=refused)
        compute = self.conn.compute
        named = named_servers(compute, p["name"])  # find_server would take a DELETED one, and fail on two
        if len(named) > 1:  # the server role refuses two first; only a race gets here
            self.fail_json(msg=f"{len(named)} servers are named {p['name']} ({', '.join(s.id for s in named)})")
        server = named[0] if named else None
        changed = server is None or p["created_early"]
        # an existing one is from an up interrupted while this module waited, or from this up's lookup
        # (created_early): adopt it, name what it made
        made_here = server is None or p["created_early"]
        killer = {}
        if server is None:
            server, address, made, carried = self._create(data)
            if carried:
                killer["killer_at_create"] = carried
        else:
            server = compute.get_server(server.id)
            address, made = self._address() if p["floating_ip"] else (None, False)  # an adopted one: while Nova builds
        server = self._wait(server)
        if server.status == "ACTIVE":
            ports = [port.to_dict(computed=False) for port in self.conn.network.ports(device_id=server.id)]
            if address is not None:
                address, moved = self._attach(address, ports)  # None when Neutron refused: the role tries
                changed = changed or made or moved
            if made_here and p["killer"]:
                # The guest runs from now on, and has its address: its killer's own credential next, before the
                # volumes' names, in place of the create's (which may delete any server of the project). Not
                # earlier: Nova refuses a building server's metadata (compute/api.py update_instance_metadata
                # wants vm_state ACTIVE, PAUSED, SUSPENDED or STOPPED).
                kept = address is None or p["floating_ip"]["keep"]
                killer["killer"] = make_and_hand(self.conn, p["killer"], p["region_name"], p["interface"], server.id,
                                                 None if kept else address.id)  # fmt: skip
        pool = server.availability_zone or p["pool"]
        # volumes that existed were named by the up that made them; none was made here
        volumes = self._name_volumes(server, pool) if not p["volumes_exist"] else {}
        renamed = volumes.pop("renamed", False)
        if server.status == "ACTIVE":
            attached = {"floating_ip": address.to_dict(computed=False)} if address is not None else {}
            shown = without_handoff(server.to_dict(computed=False))  # the create's secret stays out of the result
            self.exit_json(
                changed=changed or renamed, placed=True, pool=pool, server=shown, ports=ports, **attached, **volumes,
                **killer,
            )  # fmt: skip
        if address is not None and released(made, p["floating_ip"]["keep"], bool(address.port_id)):
            self.conn.network.delete_ip(address, ignore_missing=True)  # not left billing for a server that never came
        fault = (server.fault or {}).get("message") or f"server ended in {server.status}"
        compute.delete_server(server.id)
        compute.wait_for_delete(server, wait=self.params["timeout"])
        drop(self.conn, killer.get("killer_at_create", {}))  # its server is gone: nothing left for it to delete
        found = NO_ROOM.search(fault)
        if found and not volumes:
            self.exit_json(changed=True, placed=False, reason=found.group(0))
        kept = ", ".join(p[role]["name"] for role in volumes)
        kept = f"; the volumes it made are kept as {kept} and pin pool {pool}" if kept else ""
        self.fail_json(msg=f"the server {p['name']} failed as {p['flavor']} in {pool}: {fault}{kept}", **volumes)

    def _create(self, data: str | None):
        """(the server, the project's address and whether made here, what the create's credential is)."""
        p = self.params
        compute = self.conn.compute
        # four services, each with its first call's discovery: asked side by side (~0.2 s on the ground)
        with ThreadPoolExecutor(max_workers=3) as beside:
            flavor = beside.submit(compute.find_flavor, p["flavor"], ignore_missing=False)
            network = beside.submit(self.conn.network.find_network, p["network"], ignore_missing=False)
            ahead = beside.submit(self._ahead)
            try:
                mappings = self._mappings()
                flavor, network = flavor.result(), network.result()
            except BaseException:
                address, made, _, carried = ahead.result()
                self._undo(address, made, carried)
                raise
            address, made, metadata, carried = ahead.result()
        try:
            server = create_once(  # never sent twice (gpu_rent_warm_start.py NO_RESEND_NOTES)
                self.conn,
                name=p["name"],
                flavor_id=flavor.id,
                availability_zone=p["pool"],
                networks=[{"uuid": network.id}],
                security_groups=[{"name": p["security_group"]}],
                key_name=p["key_name"],
                tags=p["tags"],
                metadata={**p["metadata"], **metadata},
                block_device_mapping=mappings,
                **({"user_data": data} if data else {}),  # create_user_data's
            )
        except self.sdk.exceptions.HttpException as e:
            self._undo(address, made, carried)
            found = NO_ROOM.search(str(e))
            if found:  # refused at the API: nothing was created
                self.exit_json(changed=False, placed=False, reason=found.group(0))
            self.fail_json(msg=f"the create of server {p['name']} was refused: {scrubbed(str(e), metadata)}")
        except DroppedCreate as e:  # Nova may have made it: what it carries and its address stay for its killer
            if e.made_none:
                self._undo(address, made, carried)
            self.fail_json(msg=str(e))
        except Exception:  # never sent (no endpoint, a refusal of the SDK's own): nothing was created
            self._undo(address, made, carried)
            raise
        return server, address, made, carried

    def _ahead(self) -> tuple:
        """Before the create: the project's address, then the create's killer credential naming it
        (gpu_rent_killer_handoff.py CREATE_NOTES) - (address, made, the create's metadata, what it carries)."""
        p = self.params
        address, made = self._address() if p["floating_ip"] else (None, False)
        if not p["killer"]:
            return address, made, {}, {}
        kept = address is None or p["floating_ip"]["keep"]
        metadata, carried = for_create(self.conn, p["killer"], p["region_name"], p["interface"],
                                       None if kept else address.id)  # fmt: skip
        return address, made, metadata, carried

    def _undo(self, address, made: bool, carried: dict) -> None:
        """No server was made: its address goes as after a failed build, and the create's credential with it."""
        if address is not None and released(made, self.params["floating_ip"]["keep"], bool(address.port_id)):
            self.conn.network.delete_ip(address, ignore_missing=True)
        drop(self.conn, carried)

    def _mappings(self) -> list:
        p = self.params
        if p["volumes_exist"]:
            storage = self.conn.block_storage
            return [
                existing(storage.find_volume(p[role]["name"], ignore_missing=False).id, index)
                for role, index in (("boot_volume", 0), ("data_volume", -1))
            ]
        image = self.conn.image.find_image(p["image"], ignore_missing=False)
        return [
            self._mapping(p["boot_volume"], 0, source="image", uuid=image.id),
            self._mapping(p["data_volume"], -1, source="blank"),
        ]

    def _address(self):
        """(the project's floating IP, whether made here), as gpu_rent_warm_start.project_address takes it."""
        spec = self.params["floating_ip"]
        network = self.conn.network
        try:
            listed = list(network.ips(description=spec["description"]))
            return project_address(network, listed, spec["network_id"], spec["description"])
        except self.sdk.exceptions.SDKException as e:  # the server is still waited for and its volumes named
            self.warn(f"no floating IP while the server built ({e}); the floating_ip role takes one")
            return None, False

    def _attach(self, address, ports: list):
        """(the address on the server's first port, whether it moved there)."""
        if not ports:
            self.fail_json(msg=f"the server {self.params['name']} has no port to attach its floating IP to")
        if address.port_id == ports[0]["id"]:
            return address, False
        try:
            return self.conn.network.update_ip(address, port_id=ports[0]["id"]), True
        except self.sdk.exceptions.SDKException as e:
            self.warn(f"floating IP {address.floating_ip_address} not attached ({e}); the floating_ip role tries")
            return None, False

    def _mapping(self, volume: dict, boot_index: int, **source) -> dict:
        mapping = {
            "boot_index": boot_index,
            "source_type": source.pop("source"),
            "destination_type": "volume",
            "volume_size": int(volume["size"]),
            "delete_on_termination": False,
            **source,
        }
        if self.params["volume_type"]:
            mapping["volume_type"] = self.params["volume_type"]
        return mapping

    def _wait(self, server):
        deadline = time.monotonic() + self.params["timeout"]
        while True:
            server = self.conn.compute.get_server(server.id)
            if server.status != "BUILD" or time.monotonic() > deadline:
                return server
            time.sleep(0.5)

    def _name_volumes(self, server, pool: str) -> dict:
        """Give every volume this server's create made its rental name and marks, so none is left unnamed."""
        storage = self.conn.block_storage
        made = [storage.get_volume(v["id"]) for v in server.attached_volumes or []]
        if len(made) < 2:  # a volume that failed to build is not recorded on the server: find it by age
            since = _utc(server.created_at) - timedelta(minutes=2)
            made_ids = {v.id for v in made}
            made += [
                v
                for v in storage.volumes(details=True)
                if not v.name
                and v.id not in made_ids
                and v.availability_zone == pool
                and not v.attachments
                and _utc(v.created_at) >= since
                and int(v.size) in (int(self.params["boot_volume"]["size"]), int(self.params["data_volume"]["size"]))
            ]
        ids = {}
        for volume in made:
            role = "boot_volume" if volume.is_bootable or volume.volume_image_metadata else "data_volume"
            if role in ids:
                continue  # two of a kind cannot both be ours by these rules: leave the second alone
            spec = self.params[role]
            marks = {k: str(v) for k, v in (spec.get("metadata") or {}).items()}
            if volume.name != spec["name"] or any(volume.metadata.get(k) != v for k, v in marks.items()):
                storage.update_volume(volume, name=spec["name"])
                storage.set_volume_metadata(volume, **marks)
                ids["renamed"] = True
            ids[role] = volume.id
        return ids


def _utc(stamp: str) -> datetime:
    """The cloud's timestamps, with or without a zone (Nova says Z, Cinder says nothing: both UTC)."""
    moment = datetime.fromisoformat(stamp)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def main():
    FreshServerModule()()


if __name__ == "__main__":
    main()
