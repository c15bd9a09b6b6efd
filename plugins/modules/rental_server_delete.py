#!/usr/bin/python
"""Ansible module: delete the rental's server (never one gpu-rent did not rent) and its address, wait until gone."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rental_server_delete
short_description: Delete the servers of a rental's name, refusing any gpu-rent did not rent, and wait until gone
description:
  - Looks up the servers of that name (as openstack.cloud.server_info does), refuses them all - deleting
    none - when one carries neither the gpu-rent tag nor its mark, and asks Nova to delete each (its
    volumes stay - they are not deleted with a server).
  - With I(application_credential), then deletes the idle-killer's credentials of that project folder
    while Nova deletes the server - every server's, as idle_killer_credential names them (the name, the
    project id's first 8 characters, the region, the server id), the folder's server being gone.
    Keystone refusing it is returned, not raised; the wait still runs and the server's end is recorded.
  - Then waits until each server is gone - DELETED or not found, as openstacksdk's
    wait_for_delete ends - asking every half second (openstack.cloud.server waits through openstacksdk,
    which asks every 5 s; Nova's delete takes about 3 s on the test ground). A DELETED server holds
    nothing that bills (its volumes are detached, its ports gone) and every lister of gpu-rent passes
    over it. With I(floating_ip_description) it deletes the floating IPs of that description (the
    project's mark) meanwhile, as openstack.cloud.server's delete_ips would - once Nova has taken the delete
    of every server, so that no server is left running without its address - also when no server was
    found (a stop killed after its server went). Neutron refusing is returned, not raised.
  - All of it is one process and one login, where each task of its own cost a stop a module start and a login
    (about 0.8 s each of about 7 on the ground).
  - A server already gone (the idle-killer deleted it meanwhile) is no error.
options:
  name: {description: Server name., type: str, required: true}
  floating_ip_description:
    description: Once Nova has taken the servers' delete, delete the floating IPs of this description.
    type: str
  application_credential:
    description: After asking Nova to delete, delete the current user's application credential of this name.
    type: str
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
servers: {description: "The servers found and deleted (server_info's list)", returned: always, type: list}
floating_ips: {description: Ids of the floating IPs deleted., returned: with floating_ip_description, type: list}
application_credential_deleted:
  {description: Whether the credential was there and is deleted., returned: with application_credential, type: bool}
application_credential_error: {description: Why the credential was not deleted., returned: Keystone refused, type: str}
floating_ip_error: {description: Why the floating IPs were not all deleted., returned: when Neutron refused, type: str}
"""

import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils import gpu_rent_killer_handoff as handoff
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_lookup import without_handoff
except ImportError:
    from ansible.module_utils import gpu_rent_killer_handoff as handoff
    from ansible.module_utils.gpu_rent_lookup import without_handoff
from keystoneauth1.exceptions import ClientException


def ours(server: dict) -> bool:
    """Rented by gpu-rent: its tag, or (a cloud without tags) its mark in the metadata."""
    return "gpu-rent" in (server.get("tags") or []) or bool((server.get("metadata") or {}).get("gpu-rent"))


def gone(server) -> bool:
    """Not found, or DELETED: Nova sets DELETED once the volumes are detached and the ports deleted, then
    keeps listing the server for a few seconds more (2.4 s on the ground) while it frees the rest.
    openstacksdk's wait_for_delete ends there too; rental_lookup, fresh_server, the server role and
    `gpu-rent status` pass over a DELETED server, so the next up neither adopts nor counts it."""
    return server is None or server.status == "DELETED"


class RentalServerDeleteModule(OpenStackModule):
    argument_spec = dict(  # noqa: RUF012 - the base class reads it as a class attribute
        name=dict(required=True),
        floating_ip_description=dict(),
        application_credential=dict(no_log=False),  # a name, not a secret
    )
    module_kwargs = dict(supports_check_mode=False)  # noqa: RUF012 - read by the base class

    def run(self):
        p = self.params
        compute = self.conn.compute
        found = [
            s.to_dict(computed=False) if hasattr(s, "to_dict") else s
            for s in self.conn.search_servers(name_or_id=p["name"])  # server_info
            if not gone(s)  # an earlier stop ended at DELETED
        ]
        for server in found:
            if not ours(server):
                self.fail_json(
                    msg=f"server {server['name']} ({server['id']}) has neither the gpu-rent tag nor its mark: "
                    "not deleted; if it is not yours to delete, give this project another NAME in gpu-rent.vars"
                )
        for server in found:
            compute.delete_server(server["id"], ignore_missing=True)
        # Nova's delete takes seconds: the credential and the addresses go meanwhile - the addresses only now
        # that Nova has taken every server's delete (an address deleted before would leave a running server
        # unreachable to a stop killed in between; now a killed stop leaves at most the address, and the
        # next stop finds it)
        with ThreadPoolExecutor(max_workers=2) as beside:
            credential = beside.submit(self._credential_said, p["application_credential"])
            addresses = beside.submit(self._floating_ips_said, p["floating_ip_description"])
            self._wait_gone([server["id"] for server in found])
        said = {**credential.result(), **addresses.result()}
        deleted = said.get("floating_ips", [])
        changed = bool(found) or bool(deleted) or said.get("application_credential_deleted", False)
        self.exit_json(changed=changed, servers=[without_handoff(server) for server in found], **said)

    def _wait_gone(self, ids: list[str]) -> None:
        deadline = time.monotonic() + self.params["timeout"]
        while ids:
            ids = [i for i in ids if not gone(self.conn.compute.find_server(i, ignore_missing=True))]
            if ids and time.monotonic() > deadline:
                self.fail_json(msg=f"server {', '.join(ids)} still there after {self.params['timeout']} s")
            if ids:
                time.sleep(0.5)

    def _credential_said(self, name: str | None) -> dict:
        """What became of the idle-killer's credential, for the result (nothing without a name)."""
        if not name:
            return {}
        try:
            return {"application_credential_deleted": self._delete_credential(name)}
        # the wait records the server's end first, then it is said; keystoneauth's own errors (no
        # endpoint, no connection) are not SDKExceptions
        except (self.sdk.exceptions.SDKException, ClientException) as e:
            return {"application_credential_error": str(e)}

    def _delete_credential(self, name: str) -> bool:
        """The folder's idle-killer credentials, as idle_killer_credential state=absent deletes them."""
        folder = handoff.folder_name(self.conn, name, self.params["region_name"])
        return bool(handoff.prune(self.conn, folder, servers_gone_only=False))

    def _floating_ips_said(self, description: str | None) -> dict:
        """The project's floating IPs deleted, for the result (nothing without a description); the end of the
        server is recorded before Neutron's refusal is said."""
        if not description:
            return {}
        deleted = []
        try:
            for ip in self.conn.network.ips(description=description):
                self.conn.network.delete_ip(ip.id, ignore_missing=True)
                deleted.append(ip.id)
        except (self.sdk.exceptions.SDKException, ClientException) as e:
            return {"floating_ips": deleted, "floating_ip_error": str(e)}
        return {"floating_ips": deleted}


def main():
    RentalServerDeleteModule()()


if __name__ == "__main__":
    main()
