"""plugins/action/gpu_rent_light.py runs a module without AnsiballZ: it must answer as the module run by ansible does.

Each case runs the same task twice through the real `ansible` command on localhost: once the usual way (the
module packed by AnsiballZ, AnsibleModule validating), once through the action plugin (validation on the
controller, the module file run by the stand-in). The answers must be equal but for what only AnsibleModule
adds (invocation); so must a failure and a refused argument.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = Path(sys.executable).with_name("ansible")
LIGHT = ("bootstrap_probe", "data_disk_probe", "swarmui_probe", "idle_killer_held", "vm_stamp", "vm_command")


def run(
    tmp_path: Path, module: str, args: dict, light: bool, check: bool = False, python: str = sys.executable
) -> dict:
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
        "ANSIBLE_LIBRARY": str(REPO / "plugins" / "modules"),
        "ANSIBLE_MODULE_UTILS": str(REPO / "plugins" / "module_utils"),
        "ANSIBLE_ACTION_PLUGINS": str(REPO / "plugins" / "action") if light else "",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }
    # python None: a host of an inventory (the implicit localhost is given ansible's own python) left to
    # discovery, which finds the system's python3 on this PATH
    host, named = ("localhost", ["-e", f"ansible_python_interpreter={python}"]) if python else ("box", ["-i", "box,"])
    if python is None:
        named += ["-e", "ansible_python_interpreter=auto_silent"]
        env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    argv = [str(ANSIBLE), host, "-c", "local", *named,
            "-m", module, "-a", json.dumps(args), *(["--check"] if check else [])]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    answer = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"][host]
    if not answer.get("failed") and not answer.get("skipped"):  # only AnsibleModule adds invocation: which way ran
        assert ("invocation" in answer) != (light and python is not None)
    return {k: v for k, v in answer.items() if k not in ("invocation", "action") and not k.startswith("_ansible")}


def same_both_ways(tmp_path: Path, module: str, args: dict, check: bool = False) -> dict:
    usual = run(tmp_path, module, args, light=False, check=check)
    light = run(tmp_path, module, args, light=True, check=check)
    assert without_free_bytes(light) == without_free_bytes(usual)
    return light


def without_free_bytes(answer: dict) -> dict:
    """df's free bytes move between two runs on a busy disk; the rest of its lines must not."""
    if "df_lines" not in answer:
        return answer
    return {**answer, "df_lines": [line.split(None, 1)[-1] for line in answer["df_lines"]]}


def test_every_light_module_has_its_action_plugin_and_a_spec_at_module_level():
    for module in LIGHT:
        plugin = REPO / "plugins" / "action" / f"{module}.py"
        assert plugin.is_symlink() and plugin.resolve() == REPO / "plugins" / "action" / "gpu_rent_light.py"
        assert "\nARGUMENT_SPEC = " in (REPO / "plugins" / "modules" / f"{module}.py").read_text()
    assert (REPO / "playbooks" / "action_plugins").resolve() == REPO / "plugins" / "action"


def test_idle_killer_held_reads_files_and_checks_a_stamp_alike(tmp_path):
    (tmp_path / "words.json").write_text('{"server_id": "s1"}\n')
    args = {"last_words_file": str(tmp_path / "words.json"), "config_file": str(tmp_path / "absent"),
            "stamp": {"name": "killer", "inputs": "abc", "dir": str(tmp_path / "stamps")}}  # fmt: skip
    answer = same_both_ways(tmp_path, "idle_killer_held", args)
    assert answer["last_words"] and "held" not in answer and answer["stamp"]["fresh"] is False


def test_vm_stamp_records_only_outside_check_mode_then_is_fresh_alike(tmp_path):
    (tmp_path / "file").write_text("one")
    spec = {"name": "role", "inputs": {"a": 1}, "files": [str(tmp_path / "file")], "dir": str(tmp_path / "stamps")}
    same_both_ways(tmp_path, "vm_stamp", {**spec, "state": "record"}, check=True)
    assert not (tmp_path / "stamps").exists()
    light = run(tmp_path, "vm_stamp", {**spec, "state": "record"}, light=True)
    assert light == {"changed": False, "fresh": True, "why": ""} and (tmp_path / "stamps" / "role.json").is_file()
    assert same_both_ways(tmp_path, "vm_stamp", spec)["fresh"] is True
    (tmp_path / "file").write_text("two")
    assert same_both_ways(tmp_path, "vm_stamp", spec)["why"] == f"{tmp_path / 'file'} changed"


def test_swarmui_probe_reads_a_checkout_alike(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "SwarmUI.csproj").write_text("<Project/>\n")
    (tmp_path / "Data").mkdir(mode=0o750)
    (tmp_path / "Data" / "Settings.fds").write_text("Network:\n\tHost: 127.0.0.1\n")
    answer = same_both_ways(tmp_path, "swarmui_probe", {"dir": str(tmp_path)})
    assert answer["csproj"] == "<Project/>\n"


def test_bootstrap_probe_answers_and_fails_alike(tmp_path):
    answer = same_both_ways(tmp_path, "bootstrap_probe", {"disk_paths": [str(tmp_path)]})
    assert answer["df_lines"][0].split() == ["Avail", "Mounted", "on"]
    assert answer["nvidia_smi"]["rc"] == (127 if shutil.which("nvidia-smi") is None else answer["nvidia_smi"]["rc"])
    failed = same_both_ways(tmp_path, "bootstrap_probe", {"disk_paths": [str(tmp_path / "absent")]})
    assert failed["failed"] is True and "absent" in failed["msg"]


@pytest.mark.parametrize("code", [0, 3])
def test_vm_command_answers_as_ansible_builtin_command_does(tmp_path, code):
    args = {"argv": ["sh", "-c", f"cat; echo said >&2; exit {code}"], "stdin": "a secret"}
    command = run(tmp_path, "ansible.builtin.command", args, light=False)
    light = run(tmp_path, "vm_command", args, light=True)
    assert light == {k: v for k, v in command.items() if k not in ("start", "end", "delta")}
    assert light["stdout"] == "a secret" and light["rc"] == code and light["changed"] is True


def test_vm_command_is_skipped_in_check_mode_as_command_is(tmp_path):
    args = {"argv": ["touch", str(tmp_path / "made")]}
    assert run(tmp_path, "vm_command", args, light=True, check=True)["skipped"] is True
    assert not (tmp_path / "made").exists()


@pytest.mark.parametrize(
    "args",
    [{}, {"disk_paths": "x", "stamp": {"inputs": "i"}}, {"disk_paths": ["/"], "other": 1}],
    ids=["required", "suboption", "unknown"],
)
def test_bad_arguments_are_refused_in_the_same_words(tmp_path, args):
    refused = same_both_ways(tmp_path, "bootstrap_probe", args)
    assert refused["failed"] is True and refused["msg"]


def test_vm_wait_for_connection_proves_the_host_python_in_its_last_step(tmp_path):
    assert run(tmp_path, "vm_wait_for_connection", {"timeout": 10}, light=True) == {"changed": False, "elapsed": 0}


def test_vm_wait_for_connection_retries_a_missing_python_until_its_timeout(tmp_path):
    answer = run(tmp_path, "vm_wait_for_connection", {"timeout": 2}, light=True, python="/nonexistent/python3")
    assert answer["failed"] is True
    assert (
        answer["msg"].startswith("timed out waiting for ping module test") and "/nonexistent/python3" in answer["msg"]
    )


def test_data_disk_probe_refuses_a_disk_that_is_not_there_alike(tmp_path):
    args = {"link": str(tmp_path / "absent"), "wait_seconds": 0, "mount_point": str(tmp_path), "marker": ".m",
            "missing_msg": "the data volume is not attached"}  # fmt: skip
    failed = same_both_ways(tmp_path, "data_disk_probe", args)
    assert failed["failed"] is True and failed["msg"] == "the data volume is not attached"


def test_the_light_modules_use_no_more_of_ansiblemodule_than_the_stand_in_has():
    """The stand-in (gpu_rent_light.PRELUDE) has params, check_mode, exit_json, fail_json and get_bin_path, and
    takes argument_spec and supports_check_mode only: anything else would fail on the host, or be lost."""
    sources = [(REPO / "plugins" / "modules" / f"{m}.py").read_text() for m in LIGHT]
    sources.append((REPO / "plugins" / "module_utils" / "gpu_rent_stamp.py").read_text())
    used = {name for source in sources for name in re.findall(r"\bmodule\.(\w+)", source)}
    assert used <= {"params", "check_mode", "exit_json", "fail_json", "get_bin_path"}
    calls = [re.search(r"AnsibleModule\(([^)]*)\)", source) for source in sources[:-1]]
    assert all(c and set(re.findall(r"(\w+)=", c.group(1))) <= {"argument_spec", "supports_check_mode"} for c in calls)


def test_a_host_whose_python_nobody_named_runs_the_module_the_usual_way(tmp_path):
    """No interpreter named (auto_silent) or discovered yet: ansible's discovery decides, as before (run asserts
    which way ran)."""
    (tmp_path / "words.json").write_text("{}\n")
    args = {"last_words_file": str(tmp_path / "words.json"), "config_file": str(tmp_path / "absent")}
    assert run(tmp_path, "idle_killer_held", args, light=True, python=None)["last_words"] == "e30K"


def test_the_task_environment_reaches_the_program_as_for_any_module(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - vm_command: {argv: [sh, -c, 'echo \"$GREETING\"']}\n"
        "      environment: {GREETING: hello there}\n      register: said\n"
        "    - ansible.builtin.assert: {that: said.stdout == 'hello there'}\n"
    )
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"), "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_LIBRARY": str(REPO / "plugins" / "modules"),
            "ANSIBLE_ACTION_PLUGINS": str(REPO / "plugins" / "action")}  # fmt: skip
    playbook = ANSIBLE.with_name("ansible-playbook")
    done = subprocess.run([str(playbook), str(play)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]


def test_paths_are_expanded_on_the_host_with_the_task_environment_alike(tmp_path):
    """A path's ~ and $VAR are the host's, as AnsibleModule's type_path makes them there: here the task's
    HOME and STAMPS, which the controller does not have (a top-level path, a list of paths, a suboption)."""
    home = tmp_path / "home"
    (home / "checkout" / "src").mkdir(parents=True)
    (home / "checkout" / "src" / "SwarmUI.csproj").write_text("<Project/>\n")
    answers = {}
    for way in ("usual", "light"):
        play = tmp_path / f"{way}.yml"
        play.write_text(
            "- hosts: localhost\n  gather_facts: false\n"
            f"  environment: {{HOME: '{home}', STAMPS: '{tmp_path / way}'}}\n  tasks:\n"
            "    - swarmui_probe: {dir: ~/checkout, stamp: {name: probe, inputs: x, dir: $STAMPS}}\n"
            "    - vm_stamp: {name: role, inputs: x, files: [~/checkout/src/SwarmUI.csproj], dir: $STAMPS,"
            " state: record}\n"
        )
        (tmp_path / "ansible.cfg").write_text("[defaults]\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "STAMPS"))}
        env |= {"ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"), "ANSIBLE_LOCALHOST_WARNING": "0",
                "ANSIBLE_LIBRARY": str(REPO / "plugins" / "modules"),
                "ANSIBLE_MODULE_UTILS": str(REPO / "plugins" / "module_utils"),
                "ANSIBLE_ACTION_PLUGINS": str(REPO / "plugins" / "action") if way == "light" else "",
                "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}  # fmt: skip
        playbook = ANSIBLE.with_name("ansible-playbook")
        argv = [str(playbook), str(play), "-e", f"ansible_python_interpreter={sys.executable}"]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        tasks = json.loads(done.stdout)["plays"][0]["tasks"]
        answers[way] = [
            {k: v for k, v in task["hosts"]["localhost"].items() if k not in ("invocation", "action")} for task in tasks
        ]
        assert ("invocation" in tasks[0]["hosts"]["localhost"]) == (way == "usual")  # which way ran
        assert (tmp_path / way / "role.json").is_file()
    assert answers["light"] == answers["usual"]
    assert answers["light"][0]["csproj"] == "<Project/>\n"
