#!/usr/bin/python
"""Ansible module stub: the documentation of the vm_wait_for_connection action plugin (plugins/action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vm_wait_for_connection
short_description: ansible.builtin.wait_for_connection, tested end to end in one round trip
description:
  - Waits, with ansible.builtin.wait_for_connection's own loop and options, until the host takes a login
    and runs its Python; upstream's last test runs the ping module (~0.2 s of AnsiballZ on every up), this
    one runs the host's Python with C(-c) in one round trip (plugins/action/vm_wait_for_connection.py).
  - The host's Python is ansible_python_interpreter, else the discovered one, else /usr/bin/python3.
options:
  connect_timeout: {description: Seconds to wait for a connection to happen before closing and retrying., type: int,
                    default: 5}
  delay: {description: Seconds to wait before the first try., type: int, default: 0}
  sleep: {description: Seconds to sleep between tries., type: int, default: 1}
  timeout: {description: Seconds to wait in all., type: int, default: 600}
"""

RETURN = r"""
elapsed: {description: Seconds waited., returned: always, type: int}
"""
