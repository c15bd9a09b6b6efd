#!/usr/bin/python
"""Ansible module: delete the rental's server (never a server gpu-rent did not rent), or wait until it is gone."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rental_server_delete
short_description: Delete the servers of a rental's name, refusing any gpu-rent did not rent; wait until gone
description:
  - state=deleting looks up the servers of that name (as openstack.cloud.server_info does), refuses
    them all - deleting none - when one carries neither the gpu-rent tag nor its mark, asks Nova to
    delete each (its volumes stay - they are not deleted with a server) and returns their ids at
    once, so the caller does other work while Nova deletes.
  - state=gone waits until each of the given ids is gone (not found; DELETED is still listed), asking every half second.
    openstack.cloud.server waits through openstacksdk, which asks every 5 s; Nova's delete takes
    about 3 s on the test ground, so a stop paid up to 5 s for nothing.
  - With I(floating_ip_description), state=gone then deletes the floating IPs of that description
    (the project's mark), as openstack.cloud.server's delete_ips would - one process where a task of
    its own cost a stop another login and module start (0.9 s of about 10 on the ground).
  - With I(application_credential), state=deleting then deletes the idle-killer's credential of that name
    while Nova deletes the server (named as idle_killer_credential names it - the name, the project id's
    first 8 characters and the region), where a task of its own cost a stop another login and module
    start. Keystone refusing it is returned, not raised; the wait still runs and records the server's end.
  - A server already gone (the idle-killer deleted it meanwhile) is no error.
options:
  name: {description: Server name (state=deleting)., type: str}
  ids: {description: Ids of servers to wait for (state=gone)., type: list, elements: str, default: []}
  state: {description: deleting or gone., type: str, default: deleting, choices: [deleting, gone]}
  floating_ip_description:
    description: Once the servers are gone (state=gone), delete the floating IPs of this description.
    type: str
  application_credential:
    description: >-
      After asking Nova to delete (state=deleting), delete the current user's application credential
      of this name.
    type: str
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
servers: {description: "The servers found and deleted (server_info's list)", returned: state=deleting, type: list}
floating_ips: {description: Ids of the floating IPs deleted., returned: state=gone, type: list}
application_credential_deleted:
  {description: Whether the credential was there and is deleted., returned: with application_credential, type: bool}
application_credential_error: {description: Why the credential was not deleted., returned: Keystone refused, type: str}
floating_ip_error: {description: Why the floating IPs were not all deleted., returned: when Neutron refused, type: str}
"""

import time

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule
from keystoneauth1.exceptions import ClientException


def ours(server: dict) -> bool:
    """Rented by gpu-rent: its tag, or (a cloud without tags) its mark in the metadata."""
    return "gpu-rent" in (server.get("tags") or []) or bool((server.get("metadata") or {}).get("gpu-rent"))


def gone(server) -> bool:
    """Not found. Nova shows a deleted server as DELETED for a few seconds more (2.3 s on the ground), and
    lists it too: up's lookup would take it for the rental's server. openstacksdk's wait_for_delete, and
    the bench's floor, end at DELETED; stop waits until the cloud no longer shows it at all."""
    return server is None


class RentalServerDeleteModule(OpenStackModule):
    argument_spec = dict(  # noqa: RUF012 - the base class reads it as a class attribute
        name=dict(),
        ids=dict(type="list", elements="str", default=[]),
        state=dict(default="deleting", choices=["deleting", "gone"]),
        floating_ip_description=dict(),
        application_credential=dict(no_log=False),  # a name, not a secret
    )
    module_kwargs = dict(supports_check_mode=False)  # noqa: RUF012 - read by the base class

    def run(self):
        p = self.params
        compute = self.conn.compute
        if p["state"] == "gone":
            deadline = time.monotonic() + p["timeout"]
            left = list(p["ids"])
            while left:
                left = [i for i in left if not gone(compute.find_server(i, ignore_missing=True))]
                if left and time.monotonic() > deadline:
                    self.fail_json(msg=f"server {', '.join(left)} still there after {p['timeout']} s")
                if left:
                    time.sleep(0.5)
            deleted, refused = [], {}
            if p["floating_ip_description"]:
                try:
                    self._delete_floating_ips(p["floating_ip_description"], deleted)
                except (self.sdk.exceptions.SDKException, ClientException) as e:  # the end is recorded first, then said
                    refused = {"floating_ip_error": str(e)}
            self.exit_json(changed=bool(deleted), floating_ips=deleted, **refused)
        if not p["name"]:
            self.fail_json(msg="name is required with state=deleting")
        found = [
            s.to_dict(computed=False) if hasattr(s, "to_dict") else s
            for s in self.conn.search_servers(name_or_id=p["name"])  # server_info
        ]
        for server in found:
            if not ours(server):
                self.fail_json(
                    msg=f"server {server['name']} ({server['id']}) has neither the gpu-rent tag nor its mark: "
                    "not deleted; if it is not yours to delete, give this project another NAME in gpu-rent.vars"
                )
        for server in found:
            compute.delete_server(server["id"], ignore_missing=True)
        credential = {}
        if p["application_credential"]:
            try:
                credential = {"application_credential_deleted": self._delete_credential(p["application_credential"])}
            # the wait records the server's end first, then it is said; keystoneauth's own errors (no
            # endpoint, no connection) are not SDKExceptions
            except (self.sdk.exceptions.SDKException, ClientException) as e:
                credential = {"application_credential_error": str(e)}
        changed = bool(found) or credential.get("application_credential_deleted", False)
        self.exit_json(changed=changed, servers=found, **credential)

    def _delete_credential(self, name: str) -> bool:
        """The idle-killer's credential, as idle_killer_credential state=absent deletes it (and names it)."""
        identity = self.conn.identity
        user = self.conn.session.get_user_id()
        full = "-".join(filter(None, (name, self.conn.current_project_id[:8], self.params["region_name"])))
        found = identity.find_application_credential(user=user, name_or_id=full, ignore_missing=True)
        if found:
            identity.delete_application_credential(user, found.id)
        return bool(found)

    def _delete_floating_ips(self, description: str, deleted: list[str]) -> None:
        """After the server: an address deleted first would leave a running server unreachable to a stop
        killed in between; the other way round only the address is left, and the next stop finds it."""
        network = self.conn.network
        for ip in list(network.ips(description=description)):
            network.delete_ip(ip.id, ignore_missing=True)
            deleted.append(ip.id)


def main():
    RentalServerDeleteModule()()


if __name__ == "__main__":
    main()
