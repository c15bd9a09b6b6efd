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
  - One credential per server (plugins/module_utils/gpu_rent_killer_handoff.py); Keystone keeps
    application credentials per user, not per project, so its name is name, the project id's first 8
    characters, the region and the server id; two servers, folders, projects or regions never take
    each other's. A credential made is handed to the server (its metadata, where its killer reads it)
    unless hand is false, and the folder's credentials of servers that are gone are deleted.
  - state=absent deletes the credential of server_id, or without it every credential of the folder.
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
  hand: {description: "Put a credential made in the server's metadata, for its killer.", type: bool, default: true}
  unhand:
    description: "Only take the handed credential out of server_id's metadata, and delete the create credential."
    type: bool
    default: false
  state: {description: present or absent., type: str, default: present, choices: [present, absent]}
extends_documentation_fragment:
  - openstack.cloud.openstack
"""

RETURN = r"""
id: {description: Credential id., returned: when present, type: str}
name: {description: "Credential name: name-<project id[:8]>[-<region>]-<server id>.", returned: when present, type: str}
pruned: {description: "The folder's credentials deleted, their server gone.", returned: when made, type: list}
deleted: {description: "Credentials deleted (state=absent without server_id).", returned: when absent, type: list}
secret: {description: Credential secret (only when made by this run)., returned: when changed and present, type: str}
expires_at: {description: Expiry (ISO 8601, UTC)., returned: when present, type: str}
access_rules: {description: The access rules., returned: when present, type: list}
"""

from datetime import UTC, datetime, timedelta

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils import gpu_rent_killer_handoff as handoff
except ImportError:
    from ansible.module_utils import gpu_rent_killer_handoff as handoff


def _expiry(value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


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
        hand=dict(type="bool", default=True),
        unhand=dict(type="bool", default=False),
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
        folder = handoff.folder_name(self.conn, p["name"], p["region_name"])
        if p["unhand"]:  # the VM proved the credential it holds: out of the server's metadata, and the create's gone
            if self.ansible.check_mode:
                self.exit_json(changed=False)
            taken = handoff.unhand(self.conn, p["server_id"])
            forgotten = handoff.forget_create(self.conn, p["name"], p["region_name"])
            self.exit_json(changed=taken or forgotten)
        if p["state"] == "absent":
            if p["server_id"]:
                found = self._find(handoff.credential_name(self.conn, p["name"], p["region_name"], p["server_id"]))
                if found and not self.ansible.check_mode:
                    identity.delete_application_credential(user, found.id)
                self.exit_json(changed=bool(found))
            gone = [] if self.ansible.check_mode else handoff.prune(self.conn, folder, servers_gone_only=False)
            self.exit_json(changed=bool(gone), deleted=gone)

        if not handoff.NOVA_ID.fullmatch(p["server_id"] or ""):  # required_if lets an empty string through
            self.fail_json(msg=f"server_id {p['server_id']!r} is not a server's id")
        name = handoff.credential_name(self.conn, p["name"], p["region_name"], p["server_id"])
        found = self._find(name)
        rules = handoff.access_rules(self.conn, p["interface"], p["server_id"], p["floating_ip_id"], p["rule_path"])
        now = datetime.now(UTC)
        if found and found.id == p["known_id"] and self._still_good(found, rules, now):
            self.exit_json(changed=False, id=found.id, name=name, expires_at=found.expires_at,
                           access_rules=rules)  # fmt: skip
        if self.ansible.check_mode:
            self.exit_json(changed=True)
        if found:
            identity.delete_application_credential(user, found.id)
        made, warning = self._create(name, rules)
        if warning:
            self.warn(warning)
        elif handoff.rule_set(made.access_rules) != handoff.rule_set(rules):
            # a Keystone that ignores access rules gave a credential that can do what you can
            identity.delete_application_credential(user, made.id)
            self.fail_json(msg=f"Keystone did not keep the access rules (it made {made.access_rules}): not used")
        if p["hand"]:  # in the server's metadata too, where its killer takes it on a boot of its own
            try:
                handoff.hand(self.conn, p["server_id"], made, p["floating_ip_id"])
            except self.sdk.exceptions.SDKException as e:  # a server in a task: the arm writes it over SSH
                why = handoff.redacted(e, made)
                self.warn(f"the credential was not handed to server {p['server_id']} (its metadata): {why}")
        try:
            pruned = handoff.prune(self.conn, folder, keep=p["server_id"])
        except self.sdk.exceptions.SDKException as e:  # left for the next make, or stop
            pruned = []
            self.warn(f"the credentials of servers that are gone were not deleted: {handoff.redacted(e, made)}")
        self.exit_json(changed=True, id=made.id, name=name, secret=made.secret, expires_at=made.expires_at,
                       access_rules=made.access_rules or [], pruned=pruned)  # fmt: skip

    def _find(self, name: str):
        return self.conn.identity.find_application_credential(
            user=self.conn.session.get_user_id(), name_or_id=name, ignore_missing=True
        )

    def _still_good(self, found, rules, now) -> bool:
        expires = _expiry(found.expires_at)
        if expires is None or expires - now < timedelta(days=self.params["renew_days"]) or found.unrestricted:
            return False
        have = handoff.rule_set(found.access_rules)
        return have == handoff.rule_set(rules) or (not have and self.params["allow_unrestricted_rules"])

    def _create(self, name, rules):
        days = self.params["days"]
        try:
            return handoff.make(self.conn, name, rules, days), None
        except self.sdk.exceptions.BadRequestException as e:
            if "access_rules" not in str(e) or not self.params["allow_unrestricted_rules"]:
                raise
        roles = self.params["fallback_roles"]
        if roles:
            made = handoff.make(self.conn, name, None, days, roles=[{"name": r} for r in roles])
            return made, f"this cloud's Keystone has no access rules: the idle-killer's credential has roles {roles}"
        made = handoff.make(self.conn, name, None, days)
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
