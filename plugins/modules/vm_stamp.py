#!/usr/bin/python
"""Ansible module: a role's proof, kept on the VM, that its work is done for these inputs and still in place."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vm_stamp
short_description: Tell whether a role's work on this host is done for the same inputs and still whole
description:
  - A role that finished records a stamp (state=record) - a digest of its inputs (its variables and its
    own files), the checksums of the files it made and the units it runs. The next run asks first
    (state=check) and skips its work when the stamp is fresh - the same inputs, every file as it was
    made, every unit active - so a warm run costs one task where it cost dozens of look-ups.
  - Anything else makes the stamp stale and the role runs whole, which mends what was wrong - a
    changed setting, a missing or edited file, a stopped service; why is returned in words.
  - Stamps live on the host (by default on the boot disk, C(/var/lib/gpu-rent/stamps)), so a new boot
    disk has none and a new data disk shows as changed files.
  - Recording reports no change - it is bookkeeping about the role's work, which reports its own.
options:
  name: {description: The stamp's name (the role's)., required: true, type: str}
  state: {description: check or record., type: str, default: check, choices: [check, record]}
  inputs: {description: "What the work depends on (hashed, never stored or returned; the roles hand a digest).",
           type: raw, required: true}
  files: {description: Files whose content must stay as the role left it., type: list, elements: path, default: []}
  units: {description: systemd units that must be active., type: list, elements: str, default: []}
  absent: {description: Files that must not exist (a rebuild asked for)., type: list, elements: path, default: []}
  force: {description: Report stale whatever the stamp says (e.g. an update was asked for)., type: bool, default: false}
  dir: {description: Where stamps are kept., type: path, default: /var/lib/gpu-rent/stamps}
"""

RETURN = r"""
fresh: {description: The work is done for these inputs and in place (check)., returned: always, type: bool}
why: {description: Why the stamp is stale, in words; empty when fresh., returned: always, type: str}
"""

from ansible.module_utils.basic import AnsibleModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_stamp import STAMP_OPTIONS, check, record
except ImportError:
    from ansible.module_utils.gpu_rent_stamp import STAMP_OPTIONS, check, record

# Module level: the action plugin of the same name (plugins/action/gpu_rent_light.py) validates with it too.
ARGUMENT_SPEC = dict(state=dict(default="check", choices=["check", "record"]), **STAMP_OPTIONS)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["state"] == "record":
        if not module.check_mode:
            record(p)
        module.exit_json(changed=False, fresh=True, why="")
    module.exit_json(changed=False, **check(p, lambda: module.get_bin_path("systemctl", required=True)))


if __name__ == "__main__":
    main()
