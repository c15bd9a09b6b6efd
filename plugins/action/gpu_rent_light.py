"""Run one of this collection's stdlib-only modules on the host without AnsiballZ: one round trip, ~0.05 s.

Not a task of its own: bootstrap_probe, data_disk_probe, swarmui_probe, idle_killer_held, vm_stamp and
vm_command each have an action plugin of their name, a symlink to this file (the task's action names the module to run).
A module run the usual way costs ~0.2 s over SSH before it does anything: the controller wraps it with
ansible's module_utils, the host unpacks and compiles them (`ansible.builtin.ping` took 0.20 s, `raw:
python3 -c pass` 0.04 s on the test ground), and a warm `up` runs these reads on every run. They need
nothing of ansible on the host but AnsibleModule's params, check_mode (and its refusal by a module that does
not support it), exit_json, fail_json and get_bin_path, so:

- the controller validates the task's arguments with ansible's own validator, as AnsibleModule does,
  against the module's ARGUMENT_SPEC (types, defaults, choices, suboptions, the same refusal), but for the
  expansion of a path's ~ and $VAR: that needs the host's home and environment (the task's included), so
  the host makes it, as AnsibleModule's type_path does there;
- the host gets one Python program on stdin: a stand-in for those five members, the module_utils the
  module imports (gpu_rent_stamp) and the module file itself, run as __main__ unchanged;
- its JSON answer is the task's result; a crash is a failure with its stderr, as ansible reports one.

A host whose Python nobody has named (vm_host names the VM's) or discovered yet, and a delegated task, run the
module the usual way: ansible's interpreter discovery then decides, as before.

The module file stays the truth: ansible-doc, the unit tests and a run without this plugin take the same code
(tests/unit/test_light_modules.py runs each both ways and compares).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from ansible.module_utils.common.arg_spec import ModuleArgumentSpecValidator
from ansible.module_utils.common.validation import check_type_str
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase

PLUGINS = Path(__file__).resolve().parents[1]
MODULE_UTILS = ("gpu_rent_stamp",)  # what the light modules import, in dependency order

# The host's side: AnsibleModule's members these modules use, with ansible's semantics (get_bin_path also
# looks in the sbin folders; fail_json sets failed; exit_json and fail_json end the program).
PRELUDE = r"""
import json, os, sys, types

def _done(result):
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    sys.exit(0)

def _expanded(value, paths):
    # type path (or a list of them) where `paths` marks True: expanduser(expandvars()), as ansible's
    # check_type_path makes it on the host; a dict of marks: the same inside the suboptions
    if paths is True:
        if isinstance(value, list):
            return [os.path.expanduser(os.path.expandvars(v)) if isinstance(v, str) else v for v in value]
        return os.path.expanduser(os.path.expandvars(value)) if isinstance(value, str) else value
    if isinstance(value, list):
        return [_expanded(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: _expanded(v, paths[k]) if k in paths else v for k, v in value.items()}
    return value

class AnsibleModule:
    def __init__(self, argument_spec, supports_check_mode=False):  # any other check would be lost: refused
        self.params = _expanded(_PARAMS, _PATHS)
        self.check_mode = _CHECK_MODE
        if self.check_mode and not supports_check_mode:
            self.exit_json(skipped=True, msg="remote module (%s) does not support check mode" % _NAME)

    def exit_json(self, **result):
        _done(result)

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        _done(result)

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        paths = [d for d in (opt_dirs or []) if d and os.path.exists(d)]
        paths += os.environ.get("PATH", "").split(os.pathsep)
        paths += [p for p in ("/sbin", "/usr/sbin", "/usr/local/sbin") if p not in paths and os.path.exists(p)]
        for d in paths:
            path = os.path.join(d, arg) if d else ""
            if path and os.path.exists(path) and not os.path.isdir(path) and os.access(path, os.X_OK):
                return path
        if required:
            self.fail_json(msg='Failed to find required executable "%s" in paths: %s' % (arg, os.pathsep.join(paths)))
        return None

def _module(name, source):
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    sys.modules[name] = module
    return module

for _name in ("ansible", "ansible.module_utils"):
    sys.modules[_name] = types.ModuleType(_name)
sys.modules["ansible.module_utils.basic"] = types.ModuleType("ansible.module_utils.basic")
sys.modules["ansible.module_utils.basic"].AnsibleModule = AnsibleModule
"""


def payload(
    name: str, module_source: str, utils: dict[str, str], params: dict, check_mode: bool, paths: dict | None = None
) -> str:
    """The program the host runs: the stand-in, the module_utils as ansible.module_utils.<name>, the module.
    `paths` marks the parameters the host expands as paths (controller_spec)."""
    given = (f"import json\n_NAME = {name!r}\n_PARAMS = json.loads({json.dumps(params)!r})\n"
             f"_PATHS = json.loads({json.dumps(paths or {})!r})\n_CHECK_MODE = {check_mode!r}")  # fmt: skip
    parts = [given, PRELUDE]
    for name, source in utils.items():
        parts.append(f"_module({'ansible.module_utils.' + name!r}, {source!r})")
    parts.append(f"exec(compile({module_source!r}, 'module', 'exec'), {{'__name__': '__main__'}})")
    return "\n".join(parts) + "\n"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def argument_spec(module_name: str) -> dict:
    """The module's ARGUMENT_SPEC, read by importing the module file here on the controller."""
    for util in MODULE_UTILS:  # as the module imports them in a direct run (playbooks/module_utils)
        full = f"ansible.module_utils.{util}"
        if full not in sys.modules and importlib.util.find_spec(full) is None:
            _load(full, PLUGINS / "module_utils" / f"{util}.py")
    return _load(f"gpu_rent_light_{module_name}", PLUGINS / "modules" / f"{module_name}.py").ARGUMENT_SPEC


def path(value):
    """check_type_path but for its expansion, which the host makes (the PRELUDE's _expanded). Named `path`:
    the validator names a callable type by its __name__, so a refusal reads "unable to convert to path"."""
    return check_type_str(value)


def controller_spec(spec: dict) -> tuple[dict, dict]:
    """(the spec with each path type checked by `path`, the marks of where they were, for the host)."""
    checked, marks = {}, {}
    for key, option in spec.items():
        option = dict(option)
        if option.get("type") == "path" or option.get("elements") == "path":
            option.update({k: path for k in ("type", "elements") if option.get(k) == "path"})
            marks[key] = True
        if "options" in option:
            option["options"], inner = controller_spec(option["options"])
            if inner:
                marks[key] = inner
        checked[key] = option
    return checked, marks


def host_python(task, task_vars: dict) -> str | None:
    """The host's Python as the inventory names it or an earlier task discovered it; None for a delegated task
    (its host's variables are another's) or a host whose Python nobody has named or found yet."""
    if task.delegate_to:
        return None
    named = task_vars.get("ansible_python_interpreter")
    if named and not str(named).startswith("auto"):  # auto, auto_silent, auto_legacy...: discovery's to decide
        return named
    return (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        name = self._task.action.rsplit(".", 1)[-1]
        spec, paths = controller_spec(argument_spec(name))
        checked = ModuleArgumentSpecValidator(spec).validate(self._task.args)
        if len(checked.errors.errors):  # as AnsibleModule.__init__ fails: on the first error, in its words
            msg = checked.errors.msg
            if isinstance(checked.errors[0], UnsupportedError):
                msg = f"Unsupported parameters for ({name}) module: {msg}"
            result.update(failed=True, msg=msg)
            return result
        python = host_python(self._task, task_vars or {})
        if python is None:  # no Python known for this host: ansible's own way, which discovers one
            return self._execute_module(module_name=self._task.action, task_vars=task_vars)
        utils = {u: (PLUGINS / "module_utils" / f"{u}.py").read_text(encoding="utf-8") for u in MODULE_UTILS}
        module_source = (PLUGINS / "modules" / f"{name}.py").read_text(encoding="utf-8")
        program = payload(name, module_source, utils, checked.validated_parameters, bool(self._task.check_mode), paths)
        command = f"{self._compute_environment_string()} {self._templar.template(python)} -".strip()
        ran = self._low_level_execute_command(command, in_data=program.encode("utf-8"))
        try:
            answer = json.loads(ran["stdout"])
        except ValueError:
            result.update(failed=True, msg="MODULE FAILURE", rc=ran["rc"],
                          module_stdout=ran["stdout"], module_stderr=ran["stderr"])  # fmt: skip
            return result
        result.update(answer)
        return result
