#!/usr/bin/python
"""Ansible module: the tags and metadata of a server up brings back, set by its id; it never creates one."""

from __future__ import annotations

DOCUMENTATION = r"""
module: kept_server
short_description: Set the tags and metadata of an existing server by its id; one that went is an error, never a create
description:
  - openstack.cloud.server with state present creates a server when the one it names is not there. After up's
    lookup and the wait to bring it back, a server its idle-killer or another laptop's stop deleted meanwhile would
    come back as a new server no killer guards, its data volume attached after boot (money review #17).
  - This module reads the server by id and fails, in openstacksdk's words ("No Server found for <id>"), when it
    went; it creates nothing.
  - Tags are replaced whole, only when they differ, through Nova's tag API (microversion 2.26), since without
    "preemptible" Selectel bills the full price, and a tool that replaced the list drops it.
  - The metadata keys given are set where they differ, the others kept, as openstack.cloud.server_metadata does.
options:
  id: {description: The server's id., type: str, required: true}
  tags: {description: The whole list of tags the server carries., type: list, elements: str, default: []}
  metadata: {description: Metadata keys and values the server carries (other keys are kept)., type: dict, default: {}}
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
server: {description: "The server after the change, without the killer's handoff.", returned: always, type: dict}
"""

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_lookup import without_handoff
except ImportError:
    from ansible.module_utils.gpu_rent_lookup import without_handoff

# Nova's tag API came with microversion 2.26 (PUT /servers/{id}/tags replaces the whole list).
TAGS_MICROVERSION = "2.26"


def tags_differ(have: list | None, want: list[str]) -> bool:
    """Whether the server's tags are not the wanted set (Nova keeps no order)."""
    return sorted(set(have or [])) != sorted(set(want))


def metadata_update(have: dict | None, want: dict) -> dict:
    """The whole metadata to set (Nova's set replaces it: the keys kept, the wanted ones changed), or {} when
    every wanted key already has its value."""
    have = dict(have or {})
    if all(have.get(k) == str(v) for k, v in want.items()):
        return {}
    return {**have, **{k: str(v) for k, v in want.items()}}


class KeptServerModule(OpenStackModule):
    argument_spec = dict(  # noqa: RUF012 - the base class reads it as a class attribute
        id=dict(required=True),
        tags=dict(type="list", elements="str", default=[]),
        metadata=dict(type="dict", default={}),
    )
    module_kwargs = dict(supports_check_mode=False)  # noqa: RUF012 - read by the base class

    def run(self):
        p = self.params
        compute = self.conn.compute
        found = compute.find_server(p["id"], ignore_missing=True)
        if found is None:
            self.fail_json(msg=f"No Server found for {p['id']}")
        server = compute.get_server(found.id)
        changed = False
        if tags_differ(server.tags, p["tags"]):
            compute.put(f"/servers/{server.id}/tags", json={"tags": p["tags"]}, microversion=TAGS_MICROVERSION)
            changed = True
        update = metadata_update(server.metadata, p["metadata"])
        if update:
            compute.set_server_metadata(server, **update)
            changed = True
        if changed:
            server = compute.get_server(server.id)
        # the credential up hands the killer in the metadata never reaches a module's printed result
        self.exit_json(changed=changed, server=without_handoff(server.to_dict(computed=False)))


def main():
    KeptServerModule()()


if __name__ == "__main__":
    main()
