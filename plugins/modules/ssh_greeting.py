#!/usr/bin/python
"""Ansible module: wait, from the controller, until sshd at an address greets, at a fine poll."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ssh_greeting
short_description: Wait until an SSH server at host and port sends its greeting, looking every tenth of a second
description:
  - Connects to I(host) and I(port) over TCP and reads the server's first line, until it begins with
    C(SSH-) (RFC 4253's identification string) or I(timeout) seconds pass; it changes nothing.
  - Run on the controller (delegate_to localhost) before ansible.builtin.wait_for_connection, which
    tries whole SSH logins a whole second apart (its sleep is an int) - a new VM's sshd answers
    about two seconds after the server is ACTIVE, and an up met it on average half a second late.
options:
  host: {description: The address to connect to., required: true, type: str}
  port: {description: The TCP port., type: int, default: 22}
  timeout: {description: Seconds to wait in all., type: int, default: 300}
  interval: {description: Seconds between two tries., type: float, default: 0.1}
"""

RETURN = r"""
greeting: {description: The server's identification line., returned: success, type: str}
waited: {description: Seconds it waited., returned: always, type: float}
"""

import socket
import time

from ansible.module_utils.basic import AnsibleModule


def greeting(host: str, port: int, seconds: float) -> str | None:
    """The server's first line when it is an SSH identification, else None; OSError when nothing answers."""
    with socket.create_connection((host, port), timeout=seconds) as conn:
        conn.settimeout(seconds)
        line = conn.recv(255).split(b"\r\n", 1)[0].decode("ascii", "replace")
    return line if line.startswith("SSH-") else None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(required=True),
            port=dict(type="int", default=22),
            timeout=dict(type="int", default=300),
            interval=dict(type="float", default=0.1),
        ),
        supports_check_mode=True,
    )
    p = module.params
    start = time.monotonic()
    last = "no answer"
    while True:
        left = start + p["timeout"] - time.monotonic()
        try:
            said = greeting(p["host"], p["port"], max(0.1, min(1.0, left)))
            if said:
                module.exit_json(changed=False, greeting=said, waited=round(time.monotonic() - start, 2))
            last = "it answered, but not as an SSH server"
        except OSError as e:
            last = str(e) or type(e).__name__
        if left <= 0:
            module.fail_json(
                msg=f"no SSH greeting from {p['host']}:{p['port']} in {p['timeout']} s ({last})",
                waited=round(time.monotonic() - start, 2),
            )
        time.sleep(p["interval"])


if __name__ == "__main__":
    main()
