"""doctor's probe of what the idle-killer will rely on: that this cloud's Nova enforces an access rule at the
path the killer's calls use, before anything is rented.

Keystone logs an access-ruled application credential in whatever its rules say; Nova's keystonemiddleware
matches the rule against the path Nova itself sees (a gateway before Nova may strip a prefix such as
Selectel's /compute), and refuses every call when Nova checks no rules at all. So the probe makes a
throw-away credential allowed one GET of a server that does not exist, at the very path the killer's
proof and DELETE use (the idle_killer_credential module's rule), calls it through the project's endpoint,
region and interface, and deletes the credential whatever happened (it expires in minutes should doctor be
killed first). A cloud that needs idle_killer_rule_path (a gateway) shows here as a 401 on the catalogue's
path; the playbooks take the override, doctor does not:

  404: Nova matched the rule and looked for the server: the killer's calls will be taken;
  401: Nova matched no rule (or checks none): every DELETE of the killer would be refused;
  403: the cloud's policy forbids the call to such a credential.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlparse

from gpu_rent.project.errors import one_line

PROBE_NAME = "gpu-rent-doctor-probe"  # the throw-away credential's name, deleted before doctor ends
PROBE_MINUTES = 10  # its life, should doctor be killed before it deletes it


def rule_path(compute_url: str, server_id: str) -> str:
    """The access rule's path, as the idle_killer_credential module builds it: the endpoint's own path."""
    return f"{urlparse(compute_url).path.rstrip('/') or '/v2.1'}/servers/{server_id}"


def verdict(code: int, path: str) -> tuple[bool, str]:
    """What Nova's answer to the probe's GET says about the killer's calls."""
    if code == 404:
        return True, f"Nova enforces the killer's access rule at {path}"
    if code == 401:
        return False, (
            f"Nova refused GET {path} (HTTP 401): it does not match an access rule to the path it sees (a gateway "
            "before Nova? set idle_killer_rule_path) or checks none; the idle-killer could never delete a VM"
        )
    if code == 403:
        return False, f"the cloud's policy forbids GET {path} to an access-ruled credential (HTTP 403)"
    return False, f"Nova answered GET {path} with HTTP {code}"


def probe(conn, auth_url: str, interface: str | None, region: str | None) -> tuple[bool, str]:
    """(ok, detail) of the probe, the throw-away credential deleted before it returns."""
    identity = conn.identity
    user = conn.session.get_user_id()
    compute = conn.session.get_endpoint(service_type="compute", interface=interface or "public", region_name=region)
    if not compute:
        return False, f"no {interface or 'public'} compute endpoint in the catalogue{f' in {region}' if region else ''}"
    nobody = str(uuid.uuid4())  # a server no one has: Nova, having matched the rule, answers 404
    path = rule_path(compute, nobody)
    expires = (datetime.now(UTC) + timedelta(minutes=PROBE_MINUTES)).strftime("%Y-%m-%dT%H:%M:%S")
    secret = secrets.token_urlsafe(32)
    try:
        made = identity.create_application_credential(
            user=user, name=f"{PROBE_NAME}-{uuid.uuid4().hex[:8]}", secret=secret, expires_at=expires,
            access_rules=[{"service": "compute", "method": "GET", "path": path}], unrestricted=False,
            description="gpu-rent doctor: may read one server that does not exist; deleted at once",
        )  # fmt: skip
    except Exception as e:  # any refusal is the check's answer, said in one line without the secret
        return False, f"could not make an access-ruled application credential: {one_line(e, [secret])[:200]}"
    result: tuple[bool, str] = (False, "the probe did not finish")
    try:
        if not made.access_rules:  # a Keystone that drops access rules: a 404 would prove nothing
            result = False, "Keystone kept no access rules on the probe's credential (before Train?)"
        else:
            result = _call(made.id, secret, auth_url, f"{compute.rstrip('/')}/servers/{nobody}", path)
    finally:
        try:
            identity.delete_application_credential(user, made.id)
        except Exception as e:  # the probe's answer stands; the leftover expires in PROBE_MINUTES
            result = result[0], f"{result[1]}; its throw-away credential was not deleted ({type(e).__name__}), " \
                f"it expires in {PROBE_MINUTES} min"  # fmt: skip
    return result


def _call(credential_id: str, secret: str, auth_url: str, url: str, path: str) -> tuple[bool, str]:
    from keystoneauth1 import session as ks_session
    from keystoneauth1.exceptions import ClientException
    from keystoneauth1.identity import v3

    auth = v3.ApplicationCredential(auth_url=auth_url, application_credential_id=credential_id,
                                    application_credential_secret=secret)  # fmt: skip
    sess = ks_session.Session(auth=auth)
    try:
        answer = sess.get(url, raise_exc=False, connect_retries=0)
    except ClientException as e:
        return False, f"the probe's GET {path} got no answer: {type(e).__name__}"
    return verdict(answer.status_code, path)
