"""stop's head start: Nova's delete asked for by the CLI before the stop playbook starts.

ansible-playbook's start, the module's own and its login take about a second before the playbook asks Nova
for the delete; asked here, the server stops billing that much sooner and the playbook's wait overlaps
Nova's work. The playbook stays the whole stop (an operator's direct run needs nothing from here): it looks
the server up by name, refuses one gpu-rent did not rent, asks again (Nova takes a DELETE of a server it is
deleting), waits until it is gone and deletes the address and the killer's credential.
"""

from __future__ import annotations

from gpu_rent.cloud.view import TAG


def rented_by_gpu_rent(server) -> bool:
    """gpu-rent's tag, or (a cloud without tags) its mark in the metadata: the rule by which the playbook's
    rental_server_delete (its ours()) refuses a delete; tests/unit pin the two to one answer."""
    return TAG in (server.tags or ()) or bool((server.metadata or {}).get(TAG))


def ask_for_delete(conn, server_id: str, name: str) -> bool:
    """Ask Nova to delete the server this project's state records, when it is still there under the project's
    server name and gpu-rent's (an id a copied project folder carries names another project's server only
    with that project's NAME). True once Nova took it; any refusal or doubt is left to the playbook, which
    looks again and says it in its own words."""
    # here, not at the top: status imports rental, which imports this module, and never loads the SDK itself
    from keystoneauth1 import exceptions as ksa_exceptions
    from openstack import exceptions as sdk_exceptions

    try:
        server = conn.compute.find_server(server_id, ignore_missing=True)
        if server is None or server.id != server_id or server.name != name or server.status == "DELETED":
            return False
        if not rented_by_gpu_rent(server):
            return False
        conn.compute.delete_server(server_id)
    except (sdk_exceptions.SDKException, ksa_exceptions.ClientException):
        return False
    return True
