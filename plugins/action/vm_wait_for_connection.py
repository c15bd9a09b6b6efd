"""ansible.builtin.wait_for_connection whose end-to-end test is one round trip instead of the ping module.

Upstream's loop, timeouts and connection resets are kept as they are (this subclasses its action plugin);
only its last step differs: it proves a login and a Python on the host with the ping module, ~0.2 s of
AnsiballZ (see gpu_rent_light.py) on every up, where `python -c` proves the same, as the light modules
run, in one round trip. A refused login or a missing Python fails the try and is retried, as a failed
ping is.
"""

from __future__ import annotations

from ansible.plugins.action.wait_for_connection import ActionModule as WaitForConnection

DEFAULT_PYTHON = "/usr/bin/python3"  # as gpu_rent_light.py


class ActionModule(WaitForConnection):
    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        if module_name != "ansible.legacy.ping":
            return super()._execute_module(module_name, module_args, task_vars=task_vars, **kwargs)
        known = task_vars or {}
        python = known.get("ansible_python_interpreter") or known.get("discovered_interpreter_python")
        python = self._templar.template(python or DEFAULT_PYTHON)
        said = self._low_level_execute_command(f"{python} -c 'print(\"pong\")'")
        if said["rc"] != 0 or said["stdout"].strip() != "pong":
            raise RuntimeError(f"{python} on the host said rc {said['rc']}: {said['stderr'].strip()[:200]}")
        return {"ping": "pong"}
