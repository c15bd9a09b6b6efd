"""Ctrl+C in the middle of up: the playbook's process group stops, the phase stays, the next up converges."""

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

from tests.ground.test_rental import BIN, Ours, gpu_rent, make_project, state, status
from tests.groundkit import wait_until


def ansible_processes_for(project: Path) -> list[int]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"GPU_RENT_PROJECT={project}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_ctrl_c_during_up_cancels_the_playbook_and_up_resumes(tmp_path, member_conn):
    project = make_project(tmp_path, f"t{uuid.uuid4().hex[:6]}")
    ours = Ours(member_conn, project.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    up = subprocess.Popen(
        [str(BIN / "gpu-rent"), "up", "--yes"], cwd=project, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # interrupt once the volumes exist and the server is being rented
        wait_until(
            "up to record its volumes",
            lambda: (
                (project / ".gpu-rent/state.json").exists()
                and "data_volume" in json.loads((project / ".gpu-rent/state.json").read_text())["resources"]
            ),
            180,
            0.2,
        )
        assert ansible_processes_for(project), "ansible-playbook should be running"
        up.send_signal(signal.SIGINT)
        _, stderr = up.communicate(timeout=60)
        assert up.returncode == 130, stderr
        assert "canceled" in stderr
        wait_until("the playbook's processes to end", lambda: not ansible_processes_for(project), 15)
        s = state(project)
        assert s["phase"] == "provisioning" and s["operation"] is None
        volumes = {s["resources"]["boot_volume"], s["resources"]["data_volume"]}
        # whatever was half-made is named, not a leftover (other tests' resources of the moment may be)
        assert ours.ids().isdisjoint(x["id"] for x in status(project)["leftovers"])

        again = gpu_rent(project, "up", "--yes")
        assert again.returncode == 0, again.stderr
        s = state(project)
        assert s["phase"] == "ready_tunneled"  # the resumed up went all the way, its tunnel open
        assert {s["resources"]["boot_volume"], s["resources"]["data_volume"]} == volumes
        assert len(ours.servers()) == 1 and len(ours.volumes()) == 2

        # --stop-on-exit: the tunnel process killed outright → its sentinel stops the VM; volumes stay
        assert gpu_rent(project, "tunnel", "--close").returncode == 0
        opened = gpu_rent(project, "tunnel", "--background", "--stop-on-exit")
        assert opened.returncode == 0, opened.stderr
        record = json.loads((project / ".gpu-rent/tunnel.json").read_text())
        os.kill(record["pid"], signal.SIGKILL)
        wait_until("the sentinel's stop to end", lambda: state(project)["phase"] == "idle", 180, 1)
        assert not ours.servers() and not ours.floating_ips() and len(ours.volumes()) == 2
        assert "ended uncleanly" in (project / ".gpu-rent/logs/sentinel.log").read_text()
    finally:
        if up.poll() is None:
            up.kill()
        gpu_rent(project, "destroy", "--i-understand-data-loss")
    assert ours.everything()["servers"] == [] and ours.everything()["volumes"] == []
