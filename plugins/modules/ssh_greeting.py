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
  - Advisory. It greets the address and port OpenSSH's own view of the host (C(ssh -G) with I(ssh_args),
    ~/.ssh/config included) names; when that sends the login through a ProxyJump or ProxyCommand it
    returns at once with I(direct) false, as the TCP connect here would not be the path the login takes.
options:
  host: {description: The address to connect to., required: true, type: str}
  port: {description: The TCP port (ansible_port); unset, the one ssh's configuration names., type: int}
  timeout: {description: Seconds to wait in all., type: int, default: 300}
  interval: {description: Seconds between two tries., type: float, default: 0.1}
  user: {description: The login user (for C(ssh -G)'s Match rules)., type: str}
  ssh_args: {description: The extra ssh options the login uses (ansible_ssh_common_args)., type: str, default: ""}
"""

RETURN = r"""
greeting: {description: The server's identification line., returned: when it greeted, type: str}
direct: {description: Whether the login reaches the host straight at host and port., returned: always, type: bool}
waited: {description: Seconds it waited., returned: always, type: float}
"""

import shlex
import socket
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule


def greeting(host: str, port: int, seconds: float) -> str | None:
    """The server's identification line, else None; OSError when nothing answers. RFC 4253 4.2 lets a
    server send other lines first: they are read past, up to 8 KiB."""
    with socket.create_connection((host, port), timeout=seconds) as conn:
        conn.settimeout(seconds)
        said = b""
        while len(said) < 8192:
            chunk = conn.recv(1024)
            if not chunk:
                break
            said += chunk
            lines = said.split(b"\r\n" if b"\r\n" in said else b"\n")
            found = next((line for line in lines[:-1] if line.startswith(b"SSH-")), None)
            if found is not None:
                return found.decode("ascii", "replace")
    return None


def reached(ssh: str | None, host: str, port: int | None, user: str | None, ssh_args: str) -> tuple | None:
    """(address, port) OpenSSH, as configured (~/.ssh/config included), logs in at; None through a jump."""
    if ssh is None:
        return host, port or 22  # no ssh client here to ask: the login's own plugin fails on that later
    pinned = ["-p", str(port)] if port else []  # Ansible passes a port only when ansible_port is set
    argv = [ssh, "-G", *shlex.split(ssh_args), *pinned, *(["-l", user] if user else []), host]
    shown = subprocess.run(argv, capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        return None
    config = dict(line.partition(" ")[::2] for line in shown.stdout.splitlines())
    if config.get("proxyjump", "none") != "none" or config.get("proxycommand", "none") != "none":
        return None
    return config.get("hostname") or host, int(config.get("port") or port or 22)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(required=True),
            port=dict(type="int"),
            timeout=dict(type="int", default=300),
            interval=dict(type="float", default=0.1),
            user=dict(),
            ssh_args=dict(default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    where = reached(module.get_bin_path("ssh"), p["host"], p["port"], p["user"], p["ssh_args"])
    if where is None:
        module.exit_json(changed=False, direct=False, waited=0.0)
    host, port = where
    start = time.monotonic()
    last = "no answer"
    while True:
        left = start + p["timeout"] - time.monotonic()
        try:
            said = greeting(host, port, max(0.1, min(1.0, left)))
            if said:
                module.exit_json(changed=False, direct=True, greeting=said, waited=round(time.monotonic() - start, 2))
            last = "it answered, but not as an SSH server"
        except OSError as e:
            last = str(e) or type(e).__name__
        if left <= 0:
            module.fail_json(
                msg=f"no SSH greeting from {host}:{port} in {p['timeout']} s ({last})",
                direct=True,
                waited=round(time.monotonic() - start, 2),
            )
        time.sleep(p["interval"])


if __name__ == "__main__":
    main()
