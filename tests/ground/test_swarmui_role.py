"""The swarmui role against what real SwarmUI does (issue 13), on one rented ground host.

The first run is playbooks/bootstrap.yml; each case then runs playbooks/swarmui.yml (the role alone)
as an operator does, on that host, and leaves it converged for the next (the cases run in file
order); the case that takes the whole checkout away runs bootstrap.yml again, which binds the data
volume anew. The stand-in behaves as upstream 062407c7 in what each case relies on: the tracked
src/Extensions/put_extensions_here, the launcher's build logic that hides a failed build, tag
broken-build-standin whose core build fails, a venv python that does not run making the backend
errored, one backend per GPU.
The host is the session's (conftest.py `bootstrapped`): ~100 s to rent and bring up once for this
module and test_bootstrap.py, then ~20-60 s a case.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.ground.test_bootstrap import converged, run_bootstrap, run_playbook
from tests.groundkit import ssh, ssh_argv, wait_until

pytestmark = pytest.mark.ground

SWARMUI = "/opt/swarmui"
# Older code waited 900 s for a backend that never runs; the cases need no more than this.
QUICK = {"swarmui_ready_timeout": 120}


@pytest.fixture(scope="module")
def rented(bootstrapped):
    """The session's bootstrapped host (test_bootstrap.py's, should it have run)."""
    return bootstrapped[0]


@pytest.fixture(scope="module")
def host(rented, bootstrapped):
    """The host with SwarmUI up through the data volume's binds."""
    assert bootstrapped[1].returncode == 0, converged(bootstrapped[1])
    return rented[0]


def run_swarmui(host: tuple[str, str], workdir, **extra) -> subprocess.CompletedProcess:
    """playbooks/swarmui.yml: the swarmui role alone, on the bootstrapped host."""
    return run_playbook("swarmui.yml", host, workdir, **extra)


def sh(address: str, command: str) -> str:
    result = ssh(address, f"set -e\n{command}", timeout=120)
    assert result.returncode == 0, f"{command!r} failed:\n{result.stderr}"
    return result.stdout


def fatal(result: subprocess.CompletedProcess) -> str:
    """The failed task's line, as ansible-playbook printed it."""
    assert result.returncode != 0, converged(result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("fatal:")]
    assert lines, converged(result)
    return lines[-1]


def list_backends(address: str) -> dict:
    api = "http://127.0.0.1:7801/API"
    script = (
        f"sid=$(curl -sf -X POST -H 'Content-Type: application/json' -d '{{}}' {api}/GetNewSession"
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"session_id\"])') && "
        f'curl -s -X POST -H \'Content-Type: application/json\' -d "{{\\"session_id\\": \\"$sid\\"}}" '
        f"{api}/ListBackends"
    )
    return json.loads(sh(address, script))


def ours(address: str) -> list[dict]:
    return [
        b
        for b in list_backends(address).values()
        if b["type"] == "comfyui_selfstart" and b["settings"].get("StartScript") == "dlbackend/ComfyUI/main.py"
    ]


def test_a_branch_checks_out_over_a_used_data_volume(rented, host, tmp_path):
    """A fresh boot volume (nothing under /opt/swarmui but the binds) meets the data volume used before:
    src/Extensions holds upstream's tracked placeholder, untracked there, and git refused a branch."""
    sh(host, f"test -f {SWARMUI}/src/Extensions/put_extensions_here")
    sh(
        host,
        "systemctl stop swarmui\n"
        f"for m in $(findmnt -rn -o TARGET | grep '^{SWARMUI}/' | sort -r); do umount \"$m\"; done\n"
        f"rm -rf {SWARMUI}\n"
        "test -f /mnt/swarm_data/Extensions/put_extensions_here",
    )
    run = run_bootstrap(rented, tmp_path, swarmui_version="master", **QUICK)
    assert run.returncode == 0, converged(run)
    assert sh(host, f"git -C {SWARMUI} rev-parse --abbrev-ref HEAD").strip() == "master"
    assert sh(host, f"git -C {SWARMUI} status --porcelain -- src/Extensions").strip() == ""
    assert [b["status"] for b in ours(host)] == ["running"]


def test_a_failed_core_build_fails_with_the_compilers_line_and_no_old_binary_runs(rented, host, tmp_path):
    """Upstream's launcher would restore the old binary and write last_build: the failure would hide."""
    run = run_swarmui(rented, tmp_path, swarmui_version="broken-build-standin", **QUICK)
    line = fatal(run)
    assert re.search(r"SwarmUI's build of [0-9a-f]{8} failed: /opt/swarmui/src/Core/Program.cs\(12,5\): "
                     r"error CS1002: ; expected\"", line), line  # fmt: skip
    state = sh(
        host,
        f"cd {SWARMUI}; git rev-parse HEAD; cat src/bin/last_build 2>/dev/null || echo none; "
        "ls src/bin/must_rebuild; ls src/bin/live_release/SwarmUI.dll src/bin/live_release_backup 2>/dev/null | wc -l; "
        "systemctl is-active swarmui || true; systemctl is-enabled swarmui || true",
    ).split()
    head, last_build, _, old_binaries, active, enabled = state
    assert last_build != head  # not recorded as built
    assert old_binaries == "0"  # nothing for the launcher to fall back on
    assert active != "active"
    assert enabled == "disabled"  # a reboot does not loop on failing builds
    # The version fixed, the next run builds and starts it.
    fixed = run_swarmui(rented, tmp_path, swarmui_version="master", **QUICK)
    assert fixed.returncode == 0, converged(fixed)
    assert sh(
        host, f"cd {SWARMUI}; cat src/bin/last_build; test ! -e src/bin/must_rebuild; git rev-parse HEAD"
    ).split()[0] == (sh(host, f"git -C {SWARMUI} rev-parse HEAD").strip())
    assert sh(host, "systemctl is-enabled swarmui").strip() == "enabled"


def test_a_venv_of_another_python_is_reinstalled_and_an_unfinished_comfyui_removed(rented, host, tmp_path):
    """A boot volume from another image: the data volume's venv points at a python that is not there."""
    comfy = f"{SWARMUI}/dlbackend/ComfyUI"
    # every interpreter link of the venv names the old image's python (SwarmUI runs venv/bin/python3)
    sh(host, f"for p in {comfy}/venv/bin/python*; do ln -sfn /usr/bin/python3.10 $p; done; "
             f"! {comfy}/venv/bin/python3 -c 1 2>/dev/null")  # fmt: skip
    sh(host, "systemctl restart swarmui")  # as after a reboot: our backend is errored now
    run = run_swarmui(rented, tmp_path, **QUICK)
    assert run.returncode == 0, converged(run)
    assert "ComfyUI's venv is reinstalled: venv/bin/python3 does not run" in run.stdout
    sh(host, f"{comfy}/venv/bin/python3 -c 1 && test -f {comfy}/.gpu-rent-installed")
    assert [b["status"] for b in ours(host)] == ["running"]

    # An install cut short over a whole checkout (no marker; the user's custom node in it): the
    # installer runs again in place, and nothing of the user's goes.
    node = f"{comfy}/custom_nodes/mine/a.py"
    sh(host, f"rm {comfy}/.gpu-rent-installed && mkdir -p {comfy}/custom_nodes/mine && touch {node}")
    kept = run_swarmui(rented, tmp_path, **QUICK)
    assert kept.returncode == 0, converged(kept)
    sh(host, f"test -f {node} && test -f {comfy}/.gpu-rent-installed")

    # A clone cut short (no marker, no main.py): removed and installed again; Models is not touched.
    sh(host, f"rm {comfy}/.gpu-rent-installed {comfy}/main.py && touch /mnt/swarm_data/Models/keep-me")
    again = run_swarmui(rented, tmp_path, **QUICK)
    assert again.returncode == 0, converged(again)
    sh(host, f"test -f {comfy}/main.py && test -f {comfy}/.gpu-rent-installed && test -f {SWARMUI}/Models/keep-me")


def test_a_users_errored_extra_backend_does_not_fail_a_start(rented, host, tmp_path):
    """The aggregate backend_status says errored as soon as any backend did; ours runs."""
    sh(
        host,
        f"printf '7:\\n    type: comfyui_api\\n    title: my offline box\\n    enabled: true\\n    settings:\\n"
        f"        Address: http://10.231.7.254:8188\\n' >> {SWARMUI}/Data/Backends.fds && systemctl restart swarmui",
    )
    run = run_swarmui(rented, tmp_path, **QUICK)
    assert run.returncode == 0, converged(run)
    # The role waits for ours alone; the remote one is errored once its init attempts ran out (an address
    # nobody has: each connect ends in "no route to host" after ARP gives up; BackendHandler.cs
    # LoadBackendDirect retries MaxBackendInitAttempts (3) times a second apart, "waiting" between).
    statuses = wait_until(
        "the offline backend errored",
        lambda: (s := {b["id"]: b["status"] for b in list_backends(host).values()}).get(7) == "errored" and s,
        90,
        2,
    )
    assert "running" in statuses.values(), statuses


def test_each_gpu_gets_a_backend_of_its_own(rented, host, tmp_path):
    """nvidia-smi on the host's PATH, printing what the real one prints for the two queries gpu-rent makes."""
    fake = (
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *index,memory.total*) printf '0, 23034\\n1, 81559\\n' ;;\n"
        "  *driver_version,name*) printf '580.82.07, NVIDIA L4\\n580.82.07, NVIDIA A100 80GB PCIe\\n' ;;\n"
        "  *) echo 'NVIDIA-SMI stand-in'; exit 0 ;;\n"
        "esac\n"
    )
    sh(host, f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{fake}EOF\nchmod +x /usr/local/bin/nvidia-smi")
    try:
        run = run_swarmui(rented, tmp_path, **QUICK)
        assert run.returncode == 0, converged(run)
        mine = ours(host)
        assert sorted(b["settings"]["GPU_ID"] for b in mine) == ["0", "1"]
        assert {b["status"] for b in mine} == {"running"}
        again = run_swarmui(rented, tmp_path, **QUICK)
        assert again.returncode == 0, converged(again)
        assert len(ours(host)) == 2  # not one more
    finally:
        sh(host, "rm -f /usr/local/bin/nvidia-smi")


def test_a_swarmui_older_than_0_9_8_is_refused_before_it_is_built(rented, host, tmp_path):
    """A repository on the host, tagged like an old release, its csproj saying 0.9.7.0 as upstream's did."""
    made = sh(
        host,
        "rm -rf /srv/Old.git /tmp/old && git clone -q --bare git://10.231.7.1/SwarmUI.git /srv/Old.git && "
        "git clone -q /srv/Old.git /tmp/old && cd /tmp/old && "
        "sed -i 's|<Version>[^<]*</Version>|<Version>0.9.7.0</Version>|' src/SwarmUI.csproj && "
        "git -c user.name=t -c user.email=t@localhost commit -qam old && git tag 0.9.7-test && "
        "git push -q origin 0.9.7-test && cat /opt/swarmui/src/bin/last_build",
    )
    run = run_swarmui(rented, tmp_path, swarmui_repo="/srv/Old.git", swarmui_version="0.9.7-test", **QUICK)
    line = fatal(run)
    said = "SwarmUI 0.9.7-test is version 0.9.7.0 (src/SwarmUI.csproj), older than 0.9.8, the oldest gpu-rent supports"
    assert said in line, line
    assert sh(host, "cat /opt/swarmui/src/bin/last_build") == made.splitlines()[-1] + "\n"  # nothing built
    back = run_swarmui(rented, tmp_path, swarmui_version="master", **QUICK)
    assert back.returncode == 0, converged(back)


def test_a_restart_waits_for_the_generation_running_and_one_that_outlasts_the_wait_stays_due(rented, host, tmp_path):
    """A run with a setting to correct restarts SwarmUI, never in the middle of a generation (money review #18):
    it waits for the generations running to end, as the idle-killer reads them (bootstrap installs its program
    first; copied here, the killer unarmed). One that outlasts swarmui_restart_wait_seconds fails the run in one
    line and leaves the restart due, and the next run restarts SwarmUI once the generation has ended."""
    program = Path(__file__).resolve().parents[2] / "gpu_rent"
    copied = subprocess.run(
        f"tar -C {program} -c on_vm --exclude __pycache__ | {shlex.join(ssh_argv())} root@{host} "
        "'mkdir -p /usr/local/lib/gpu-rent && tar -C /usr/local/lib/gpu-rent -x'",
        shell=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert copied.returncode == 0, copied.stderr
    api = "http://127.0.0.1:7801"
    queue = (
        f"sid=$(curl -sf -X POST -H 'Content-Type: application/json' -d '{{}}' {api}/API/GetNewSession"
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"session_id\"])') && "
        f'curl -sf -X POST -H \'Content-Type: application/json\' -d "{{\\"session_id\\": \\"$sid\\", '
        f'\\"seconds\\": 25, \\"count\\": 1}}" {api}/StandinTest/QueueGeneration >/dev/null && date +%s'
    )
    started = 'date -d "$(systemctl show -p ActiveEnterTimestamp --value swarmui)" +%s'
    before = int(sh(host, started))
    due = "/run/gpu-rent/swarmui-restart-due"
    sh(host, f"sed -i 's/^LaunchMode: none$/LaunchMode: web/' {SWARMUI}/Data/Settings.fds")
    queued_at = int(sh(host, queue).split()[-1])
    refused = run_swarmui(rented, tmp_path, swarmui_restart_wait_seconds=2, **QUICK)
    line = fatal(refused)
    assert re.search(r"SwarmUI not restarted with the new settings: 1 (live|waiting) gens.* after 2 s", line), line
    assert int(sh(host, started)) == before and sh(host, f"test -e {due} && echo due") == "due\n"
    assert sh(host, f"grep '^LaunchMode' {SWARMUI}/Data/Settings.fds") == "LaunchMode: none\n"  # corrected, due
    # nothing to correct now: the due restart alone makes the run restart SwarmUI, once the generation ended
    run = run_swarmui(rented, tmp_path, **QUICK)
    assert run.returncode == 0, converged(run)
    assert int(sh(host, started)) >= queued_at + 25 - 1  # after the generation's 25 s, never in them
    assert sh(host, f"test -e {due} || echo done") == "done\n"
