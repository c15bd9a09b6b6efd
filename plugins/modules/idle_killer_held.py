#!/usr/bin/python
"""Ansible module: what arming the idle-killer starts from on the VM, read in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
module: idle_killer_held
short_description: Read the killer's last words and the credential the VM holds, and check its program's stamp
description:
  - Returns, each in base64 as slurp would, the last words the killer of the VM before this one wrote
    on the boot volume and the config that holds the credential; a missing or unreadable file is left
    out.
  - With I(stamp), whether the program and its timer are in place (vm_stamp's answer), in the same
    round trip - three tasks of about 0.3 s each over SSH on every up were one.
  - It only reads. The config holds the credential's secret: the task that runs this is no_log.
options:
  last_words_file: {description: The killer's last words., required: true, type: path}
  config_file: {description: The killer's config (the credential it holds)., required: true, type: path}
  stamp:
    description: The idle_killer role's stamp (vm_stamp's options, as roles/vm_stamp/tasks/spec.yml makes them).
    type: dict
"""

RETURN = r"""
last_words: {description: The last words' content in base64., returned: when the file is there, type: str}
held: {description: The config's content in base64., returned: when the file is there, type: str}
stamp: {description: "vm_stamp's answer for I(stamp) - fresh, why.", returned: with stamp, type: dict}
"""

import base64

from ansible.module_utils.basic import AnsibleModule

# As a collection's module, or (playbooks/library in a direct run) with playbooks/module_utils beside it.
try:
    from ansible_collections.gpu_rent.rental.plugins.module_utils.gpu_rent_stamp import STAMP_OPTIONS, checked
except ImportError:
    from ansible.module_utils.gpu_rent_stamp import STAMP_OPTIONS, checked

# Module level: the action plugin of the same name (plugins/action/gpu_rent_light.py) validates with it too.
ARGUMENT_SPEC = {
    "last_words_file": {"type": "path", "required": True},
    "config_file": {"type": "path", "required": True},
    "stamp": {"type": "dict", "options": STAMP_OPTIONS},
}


def content(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return base64.b64encode(handle.read()).decode("ascii")
    except OSError:
        return None


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    found = {key: content(module.params[f"{key}_file"]) for key in ("last_words", "config")}
    said = {"last_words": found["last_words"], "held": found["config"]}
    module.exit_json(changed=False, **{k: v for k, v in said.items() if v is not None}, **checked(module))


if __name__ == "__main__":
    main()
