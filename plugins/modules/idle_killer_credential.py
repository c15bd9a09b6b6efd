#!/usr/bin/python
"""Ansible module: the idle-killer's credential: GET and DELETE of one server, DELETE of its floating IP."""

from __future__ import annotations

DOCUMENTATION = r"""
module: idle_killer_credential
short_description: Keep the idle-killer's least-privilege application credential
description:
  - Makes an application credential of the logged-in user whose access rules allow GET and DELETE
    of the given server (the GET is the idle-killer's proof that Nova matches the rule) and, when
    floating_ip_id is given, DELETE of that floating IP - nothing else - with an expiry.
  - Idempotent where the openstack.cloud application_credential module is not (it re-creates on
    every run) - the credential the VM holds (known_id) is kept while it still exists, still names
    this server and has more than renew_days left; otherwise the credential of that name is
    replaced. The secret is returned only when a credential was made.
  - A cloud whose Keystone has no access rules (before Train) gets, with allow_unrestricted_rules,
    a credential without rules, limited to fallback_roles (e.g. a role the cloud's policy lets
    delete servers and nothing else) or, without them, carrying the user's roles; and a warning.
  - Keystone keeps application credentials per user, not per project; the credential's name is
    name, the project id and the region, so that two rentals of the same NAME in two projects or
    regions never take each other's.
  - state=absent deletes the credential of that name.
options:
  name: {description: Credential name., required: true, type: str}
  server_id: {description: The server the credential may delete., type: str}
  known_id: {description: Id of the credential the VM holds now., type: str}
  days: {description: Days the credential lives., type: int, default: 7}
  renew_days: {description: A credential with fewer days left than this is replaced., type: float, default: 2}
  rule_path: {description: "Access rule path; default: the compute endpoint's path + /servers/<id>.", type: str}
  floating_ip_id: {description: "The floating IP the credential may delete too; empty: none.", type: str}
  allow_unrestricted_rules: {description: No access rules in Keystone - make one without., type: bool, default: false}
  fallback_roles: {description: Roles of a credential without access rules., type: list, elements: str, default: []}
  state: {description: present or absent., type: str, default: present, choices: [present, absent]}
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
id: {description: Credential id., returned: when present, type: str}
name: {description: "Credential name (name-<project id[:8]>[-<region>]).", returned: when present, type: str}
secret: {description: Credential secret (only when made by this run)., returned: when changed and present, type: str}
expires_at: {description: Expiry (ISO 8601, UTC)., returned: when present, type: str}
access_rules: {description: The access rules., returned: when present, type: list}
"""

import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import urlparse

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule


def _expiry(value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _rule_set(rules: list | None) -> set[tuple]:
    """Access rules as Keystone may give them back: in any order (it reuses a user's existing rules)."""
    return {(r.get("service"), r.get("method"), r.get("path")) for r in rules or []}


class IdleKillerCredentialModule(OpenStackModule):
    argument_spec = dict(  # noqa: RUF012 - the base class reads it as a class attribute
        name=dict(required=True),
        server_id=dict(),
        known_id=dict(),
        days=dict(type="int", default=7),
        renew_days=dict(type="float", default=2),
        rule_path=dict(),
        floating_ip_id=dict(),
        allow_unrestricted_rules=dict(type="bool", default=False),
        fallback_roles=dict(type="list", elements="str", default=[]),
        state=dict(default="present", choices=["present", "absent"]),
    )
    module_kwargs = dict(  # noqa: RUF012
        required_if=[("state", "present", ["server_id"])],
        supports_check_mode=True,
    )

    def run(self):
        p = self.params
        identity = self.conn.identity
        user = self.conn.session.get_user_id()
        name = "-".join(filter(None, (p["name"], self.conn.current_project_id[:8], p["region_name"])))
        found = identity.find_application_credential(user=user, name_or_id=name, ignore_missing=True)
        if p["state"] == "absent":
            if found and not self.ansible.check_mode:
                identity.delete_application_credential(user, found.id)
            self.exit_json(changed=bool(found))

        server = p["rule_path"] or self._rule_path()
        # the GET is the killer's proof that Nova matches the rule (Keystone logs an access-ruled credential
        # in whatever its rules say): it reads this server only, at the very path the DELETE uses
        rules = [{"service": "compute", "method": "GET", "path": server},
                 {"service": "compute", "method": "DELETE", "path": server}]  # fmt: skip
        if p["floating_ip_id"]:
            rules.append({"service": "network", "method": "DELETE", "path": self._floating_ip_path()})
        now = datetime.now(UTC)
        if found and found.id == p["known_id"] and self._still_good(found, rules, now):
            self.exit_json(changed=False, id=found.id, name=name, expires_at=found.expires_at,
                           access_rules=rules)  # fmt: skip
        if self.ansible.check_mode:
            self.exit_json(changed=True)
        if found:
            identity.delete_application_credential(user, found.id)
        expires = (now + timedelta(days=p["days"])).replace(microsecond=0)
        made, warning = self._create(user, name, rules, expires)
        if warning:
            self.warn(warning)
        elif _rule_set(made.access_rules) != _rule_set(rules):
            # a Keystone that ignores access rules gave a credential that can do what you can
            identity.delete_application_credential(user, made.id)
            self.fail_json(msg=f"Keystone did not keep the access rules (it made {made.access_rules}): not used")
        self.exit_json(changed=True, id=made.id, name=name, secret=made.secret, expires_at=made.expires_at,
                       access_rules=made.access_rules or [])  # fmt: skip

    def _rule_path(self) -> str:
        compute = self.conn.session.get_endpoint(service_type="compute", interface=self.params["interface"] or "public")
        prefix = urlparse(compute or "").path.rstrip("/") or "/v2.1"
        return f"{prefix}/servers/{self.params['server_id']}"

    def _floating_ip_path(self) -> str:
        # Neutron's endpoint is usually unversioned (https://host:9696); its API is /v2.0 under it
        network = self.conn.session.get_endpoint(service_type="network", interface=self.params["interface"] or "public")
        prefix = urlparse(network or "").path.rstrip("/")
        return f"{prefix}/v2.0/floatingips/{self.params['floating_ip_id']}"

    def _still_good(self, found, rules, now) -> bool:
        expires = _expiry(found.expires_at)
        if expires is None or expires - now < timedelta(days=self.params["renew_days"]) or found.unrestricted:
            return False
        have = _rule_set(found.access_rules)
        return have == _rule_set(rules) or (not have and self.params["allow_unrestricted_rules"])

    def _create(self, user, name, rules, expires):
        kwargs = dict(
            user=user,
            name=name,
            description="gpu-rent idle-killer: may delete its own server and floating IP, nothing else",
            secret=secrets.token_urlsafe(32),
            expires_at=expires.strftime("%Y-%m-%dT%H:%M:%S"),
            unrestricted=False,
        )
        try:
            return self.conn.identity.create_application_credential(access_rules=rules, **kwargs), None
        except self.sdk.exceptions.BadRequestException as e:
            if "access_rules" not in str(e) or not self.params["allow_unrestricted_rules"]:
                raise
        roles = self.params["fallback_roles"]
        if roles:
            made = self.conn.identity.create_application_credential(roles=[{"name": r} for r in roles], **kwargs)
            return made, f"this cloud's Keystone has no access rules: the idle-killer's credential has roles {roles}"
        made = self.conn.identity.create_application_credential(**kwargs)
        return made, (
            "this cloud's Keystone has no access rules: the idle-killer's credential carries your roles "
            "(it can do what you can, until it expires); set idle_killer_fallback_roles to a role that may only "
            "delete servers"
        )


def main():
    module = IdleKillerCredentialModule()
    module()


if __name__ == "__main__":
    main()
