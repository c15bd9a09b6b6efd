#!/usr/bin/python
"""Ansible module: a program with its arguments and stdin, as ansible.builtin.command runs one, in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vm_command
short_description: Run a program with argv and stdin and return what ansible.builtin.command returns
description:
  - Runs I(argv) (no shell) with I(stdin) on its standard input, and returns rc, stdout, stderr and their
    lines, and cmd, as C(ansible.builtin.command) does for the same argv and stdin; fails, as command does,
    when the exit code is not 0.
  - Exists for the roles' commands that run on every up (the idle-killer's arm, SwarmUI's readiness wait),
    run through plugins/action/gpu_rent_light.py in one round trip instead of command's ~0.2 s of
    AnsiballZ. Its stdin never appears on a command line (the idle-killer's config holds a secret).
  - Unlike command, it expands no C($VAR) or C(~) in I(argv) (command's expand_argument_vars).
  - Like command, it does not run in check mode (it is skipped) and reports changed; use changed_when.
options:
  argv: {description: The program and its arguments., required: true, type: list, elements: str}
  stdin: {description: Text for the program's standard input; none when omitted., type: str}
  stdin_add_newline: {description: End I(stdin) with a newline, as command does., type: bool, default: true}
"""

RETURN = r"""
rc: {description: The exit code., returned: always, type: int}
stdout: {description: Standard output without its trailing newline., returned: always, type: str}
stderr: {description: Standard error without its trailing newline., returned: always, type: str}
stdout_lines: {description: stdout's lines., returned: always, type: list}
stderr_lines: {description: stderr's lines., returned: always, type: list}
cmd: {description: The argv run., returned: always, type: list}
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule

# Module level: the action plugin of the same name (plugins/action/gpu_rent_light.py) validates with it too.
ARGUMENT_SPEC = dict(
    argv=dict(type="list", elements="str", required=True),
    stdin=dict(type="str"),
    stdin_add_newline=dict(type="bool", default=True),
)


def run(argv: list[str], stdin: str | None, add_newline: bool) -> dict:
    if stdin is not None and add_newline and not stdin.endswith("\n"):
        stdin += "\n"
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, encoding="utf-8", errors="replace", check=False
        )  # as command decodes
    except OSError as e:  # as command says it: rc 2, the error in msg
        return {"rc": 2, "stdout": "", "stderr": "", "msg": f"[Errno {e.errno}] {e.strerror}", "cmd": argv}
    out, err = done.stdout.rstrip("\n"), done.stderr.rstrip("\n")
    return {"rc": done.returncode, "stdout": out, "stderr": err, "cmd": argv}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False)
    p = module.params
    said = run(p["argv"], p["stdin"], p["stdin_add_newline"])
    said.update(changed=True, stdout_lines=said["stdout"].splitlines(), stderr_lines=said["stderr"].splitlines())
    if said["rc"] != 0:
        module.fail_json(**{"msg": "non-zero return code", **said})
    module.exit_json(msg="", **said)  # as command: an empty msg


if __name__ == "__main__":
    main()
