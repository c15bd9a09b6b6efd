"""The idle-killer's credential: one per server, named by its id, handed to the VM without SSH.

As soon as a new server is ACTIVE (fresh_server, for its own create and for the one up's lookup asked for),
`make` creates an application credential of the logged-in user allowed exactly GET and DELETE of that
server and DELETE of its floating IP, and `hand` puts it in the server's metadata under HANDOFF_KEY; the
killer on the VM reads it from the metadata service, which answers each VM with its own server's metadata
only (gpu_rent/on_vm/handoff.py). From then on a killer on that server can delete it, whatever becomes of
the laptop. Not before ACTIVE: Nova refuses a building server's metadata (and no guest runs yet); the
window from ACTIVE is these few calls, from the create the build too (bench/unguarded.py).

The build has a credential too. Nova takes no metadata while it builds, which is a minute or more on a real
cloud, and a laptop lost then would leave a server that nobody handed anything. So the create carries a
credential of its own (`for_create`, CREATE_NOTES), which the server's killer takes the same way, until the
server's own one replaces it at ACTIVE.

One credential per server, not per project: arming a second server (a second project folder in the same
cloud project, two laptops, a fleet's workers) never revokes the first's. The name is the project folder's
credential name, the project id's first 8 characters and the region (Keystone keeps credentials per user,
not per project), then the server id; a credential of the folder whose server is gone is deleted at the
next make (`prune`) and by stop.

Plain openstacksdk, imported by the modules (fresh_server, idle_killer_credential, rental_server_delete). The
metadata key is taken out again by the idle_killer role once the VM's arm proved what it holds (`unhand`).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlparse

# gpu_rent/on_vm/paths.py HANDOFF_KEY, where the killer looks (tests/unit/test_vm_paths.py holds the copies equal)
HANDOFF_KEY = "gpu_rent_killer"
DESCRIPTION = "gpu-rent idle-killer: may delete its own server and floating IP, nothing else"
SERVER_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
NOVA_ID = re.compile(SERVER_ID)

# CREATE_NOTES: the credential a create carries in its metadata, made just before it. The server's id is not
# known until Nova answers, so its rules allow GET and DELETE of `<compute path>/servers/*` (keystonemiddleware's
# auth_token _path_matches: `*` is one path segment) and DELETE of the address taken before the create. So it
# could delete any server of the project, and list them (`*` matches `detail` too); the killer uses it only on the
# server the metadata service says it is (gpu_rent/on_vm/handoff.py instance_id). It is readable where the
# server's metadata is (project members, any process on the VM) from the create until the server's own
# credential replaces it at ACTIVE, seconds later; with the laptop lost during the build, until its killer deletes
# the server (its metadata goes with it). The credential itself goes once the VM proved its own (the arm's unhand,
# forget_create), at stop, at the next create, and after a day. The choice: without it, a laptop lost during the
# build leaves a server no one can delete but a person, billing up to a day on Selectel, for ever elsewhere.
CREATE_SUFFIX = "create"
CREATE_DAYS = 1
ANY_SERVER = "*"

# the spec fresh_server and the lookup's warm start take as their killer option
KILLER_OPTIONS = dict(
    name=dict(required=True),
    days=dict(type="int", default=7),
    rule_path=dict(),
)


def folder_name(conn, name: str, region: str | None) -> str:
    """The project folder's part of every credential name (name, project id's first 8, region)."""
    return "-".join(filter(None, (name, conn.current_project_id[:8], region)))


def credential_name(conn, name: str, region: str | None, server_id: str) -> str:
    return f"{folder_name(conn, name, region)}-{server_id}"


def create_name(conn, name: str, region: str | None) -> str:
    """The name of the credential a create of this folder carries (CREATE_NOTES): one per folder."""
    return f"{folder_name(conn, name, region)}-{CREATE_SUFFIX}"


def server_of(folder: str, credential_name: str) -> str | None:
    """The server a credential of this folder names; '' for the one-per-project name before per-server
    credentials (gpu-rent up to 2026-12); CREATE_SUFFIX for the one a create carries; None for a credential
    that is not the folder's."""
    if credential_name == folder:
        return ""
    if credential_name == f"{folder}-{CREATE_SUFFIX}":
        return CREATE_SUFFIX
    found = re.fullmatch(re.escape(folder) + f"-({SERVER_ID})", credential_name)
    return found.group(1) if found else None


def access_rules(conn, interface: str | None, server_id: str, floating_ip_id: str | None,
                 rule_path: str | None = None) -> list[dict]:  # fmt: skip
    """GET and DELETE of the server at the path Nova sees (the compute endpoint's own path, or rule_path
    for a gateway that rewrites it), DELETE of the floating IP. The GET is the killer's proof. server_id
    ANY_SERVER: the create's credential (CREATE_NOTES), whose rule_path ends in `*` in place of an id."""
    compute = conn.session.get_endpoint(service_type="compute", interface=interface or "public")
    if rule_path and server_id == ANY_SERVER:
        rule_path = f"{rule_path.rsplit('/', 1)[0]}/{ANY_SERVER}"
    server = rule_path or f"{urlparse(compute or '').path.rstrip('/') or '/v2.1'}/servers/{server_id}"
    rules = [{"service": "compute", "method": "GET", "path": server},
             {"service": "compute", "method": "DELETE", "path": server}]  # fmt: skip
    if floating_ip_id:
        # Neutron's endpoint is usually unversioned (https://host:9696); its API is /v2.0 under it
        network = conn.session.get_endpoint(service_type="network", interface=interface or "public")
        prefix = urlparse(network or "").path.rstrip("/")
        rules.append({"service": "network", "method": "DELETE", "path": f"{prefix}/v2.0/floatingips/{floating_ip_id}"})
    return rules


def rule_set(rules: list | None) -> set[tuple]:
    """Access rules as Keystone may give them back: in any order (it reuses a user's existing rules)."""
    return {(r.get("service"), r.get("method"), r.get("path")) for r in rules or []}


def make(conn, name: str, rules: list[dict] | None, days: int, **more):
    """The credential (with its secret, which only this answer carries), expiring in `days`; rules None:
    without access rules (a Keystone before Train; idle_killer_credential's fallback, with `more` roles)."""
    expires = (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0)
    kwargs = dict(
        user=conn.session.get_user_id(),
        name=name,
        description=DESCRIPTION,
        secret=secrets.token_urlsafe(32),
        expires_at=expires.strftime("%Y-%m-%dT%H:%M:%S"),
        unrestricted=False,
        **more,
    )
    if rules is not None:
        kwargs["access_rules"] = rules
    return conn.identity.create_application_credential(**kwargs)


def handed_value(credential, floating_ip_id: str | None) -> str:
    """The metadata value the killer reads (gpu_rent/on_vm/handoff.py handed): at most 255 characters."""
    return json.dumps({"c": credential.id, "k": credential.secret, "f": floating_ip_id or None,
                       "e": (credential.expires_at or "")[:19] or None, "t": int(time.time())},
                      separators=(",", ":"))  # fmt: skip


def hand(conn, server_id: str, credential, floating_ip_id: str | None) -> None:
    """Into the server's metadata, where its killer reads it."""
    conn.compute.set_server_metadata(server_id, **{HANDOFF_KEY: handed_value(credential, floating_ip_id)})


def said(credential, server_id: str, floating_ip_id: str | None, seconds: float) -> dict:
    """What a module returns of a handed credential: never its secret (the VM has it from the metadata)."""
    return {"id": credential.id, "name": credential.name, "expires_at": credential.expires_at,
            "access_rules": list(credential.access_rules or []), "server_id": server_id,
            "floating_ip_id": floating_ip_id or "", "handed": True, "seconds": round(seconds, 3)}  # fmt: skip


def make_and_hand(conn, spec: dict, region: str | None, interface: str | None, server_id: str,
                  floating_ip_id: str | None) -> dict:  # fmt: skip
    """The one step once the server is ACTIVE: the credential made and handed; a failure said, never raised (the
    role makes one after SSH then, as before the handoff)."""
    started = time.monotonic()
    made = None
    try:
        rules = access_rules(conn, interface, server_id, floating_ip_id, spec.get("rule_path"))
        name = credential_name(conn, spec["name"], region, server_id)
        user = conn.session.get_user_id()
        # an up killed after the handoff left one of this name (Keystone keeps names unique per user)
        found = conn.identity.find_application_credential(user=user, name_or_id=name, ignore_missing=True)
        if found:
            conn.identity.delete_application_credential(user, found.id)
        made = make(conn, name, rules, int(spec.get("days") or 7))
        if rule_set(made.access_rules) != rule_set(rules):  # a Keystone that ignores access rules
            conn.identity.delete_application_credential(user, made.id)
            return {"handed": False, "why": "Keystone did not keep the access rules"}
        hand(conn, server_id, made, floating_ip_id)
    except Exception as e:  # any refusal: the role's credential.yml makes one after SSH, as before the handoff
        return {"handed": False, "why": redacted(e, made)}
    done = said(made, server_id, floating_ip_id, time.monotonic() - started)
    try:  # after the window closed: the folder's credentials whose server is gone
        done["pruned"] = prune(conn, folder_name(conn, spec["name"], region), keep=server_id)
    except Exception as e:  # left for the next make, or stop
        done["pruned_error"] = " ".join(str(e).split())[:300]
    return done


def for_create(conn, spec: dict, region: str | None, interface: str | None,
               floating_ip_id: str | None) -> tuple[dict, dict]:  # fmt: skip
    """(the metadata a create carries, what a module returns of it): the create's credential (CREATE_NOTES),
    made anew (the folder's last one goes first: Keystone keeps names unique per user). A failure is said,
    never raised, and the create goes on without one, as before: the server's own comes at ACTIVE."""
    started = time.monotonic()
    made = None
    try:
        rules = access_rules(conn, interface, ANY_SERVER, floating_ip_id, spec.get("rule_path"))
        name = create_name(conn, spec["name"], region)
        user = conn.session.get_user_id()
        found = conn.identity.find_application_credential(user=user, name_or_id=name, ignore_missing=True)
        if found:
            conn.identity.delete_application_credential(user, found.id)
        made = make(conn, name, rules, CREATE_DAYS)
        if rule_set(made.access_rules) != rule_set(rules):  # a Keystone that ignores access rules
            conn.identity.delete_application_credential(user, made.id)
            return {}, {"handed": False, "why": "Keystone did not keep the access rules"}
    except Exception as e:
        return {}, {"handed": False, "why": redacted(e, made)}
    metadata = {HANDOFF_KEY: handed_value(made, floating_ip_id)}
    return metadata, said(made, ANY_SERVER, floating_ip_id, time.monotonic() - started)


def redacted(error: Exception, made) -> str:
    """The cloud's words, one line, without the secret (Nova's validation errors echo the value refused)."""
    said = " ".join(str(error).split())
    secret = getattr(made, "secret", None)
    return (said.replace(secret, "********") if secret else said)[:300]


def prune(conn, folder: str, keep: str | None = None, servers_gone_only: bool = True) -> list[str]:
    """Delete the folder's credentials but keep's: those whose server is gone (servers_gone_only), or all
    (stop, destroy: the folder's server is gone). The create's (CREATE_NOTES) only with all: it may be all the
    VM holds until its arm (forget_create). Another folder's credentials are never touched."""
    user = conn.session.get_user_id()
    deleted = []
    for credential in conn.identity.application_credentials(user=user):
        server = server_of(folder, credential.name)
        if server is None or (keep and server == keep):
            continue
        if server == CREATE_SUFFIX:
            if servers_gone_only:
                continue
        elif servers_gone_only and (not server or conn.compute.find_server(server, ignore_missing=True) is not None):
            continue  # one per project, from before: a VM of that version may still hold it (stop deletes it)
        conn.identity.delete_application_credential(user, credential.id)
        deleted.append(credential.name)
    return deleted


def forget_create(conn, name: str, region: str | None) -> bool:
    """Delete the folder's create credential (CREATE_NOTES) once its VM proved the credential of its own (the
    arm's unhand): until then it may be all the killer holds. True when it was there."""
    user = conn.session.get_user_id()
    found = conn.identity.find_application_credential(user=user, name_or_id=create_name(conn, name, region),
                                                      ignore_missing=True)  # fmt: skip
    if found:
        conn.identity.delete_application_credential(user, found.id)
    return bool(found)


def unhand(conn, server_id: str) -> bool:
    """Take the handed credential out of the server's metadata (the VM holds it now): any process on the VM
    and anyone who may read the server could read it there. True when it was there."""
    server = conn.compute.get_server(server_id)
    if HANDOFF_KEY not in (server.metadata or {}):
        return False
    conn.compute.delete_server_metadata(server_id, [HANDOFF_KEY])
    return True
