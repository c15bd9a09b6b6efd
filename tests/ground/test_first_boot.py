"""A first boot from the image, guarded from the create on by the killer cloud-init installs (issue 37).

The project's first up makes its boot volume from the stock image, which holds nothing of gpu-rent's until
bootstrap's arm over SSH. The create carries, as its user data, an installer cloud-init runs at the first boot
(plugins/module_utils/gpu_rent_first_boot.py), and in its metadata a credential for the build
(gpu_rent_killer_handoff.py CREATE_NOTES). Here up runs as an operator runs it (ansible-playbook playbooks/up.yml,
with the killer's tick at 2 s) and is killed with -9 the moment Nova lists the server; the laptop never comes
back. The killer cloud-init installed learns its server from the metadata service, takes the credential the create
carried and deletes the server, then its address, when idle: no SSH, no arm. Cost: one cold create and its
destroy, ~2.5 min.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

from gpu_rent.on_vm import paths
from tests.ground.test_rental import BIN, Ours, gpu_rent, make_project
from tests.groundkit import GROUND, REPO, unique, wait_until


def test_a_first_boot_from_the_image_with_up_killed_at_the_create_is_deleted_by_the_killer_cloud_init_installed(
    tmp_path, member_conn
):
    name = unique("t-first")
    project = make_project(tmp_path, name)
    settings = (project / "gpu-rent.vars").read_text()  # straight to a flavor with room: one create, the first
    settings = re.sub(r"^FLAVOR=.*\n", "FLAVOR=gpu.l4.1\n", settings, flags=re.M)
    settings = re.sub(r"^FLAVOR_FALLBACK=.*\n", "", settings, flags=re.M)
    (project / "gpu-rent.vars").write_text(settings + "IDLE_MINUTES=1\nIDLE_GRACE_MINUTES=0\n")
    ours = Ours(member_conn, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_", "ANSIBLE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    try:
        run = subprocess.Popen(
            ["ansible-playbook", str(REPO / "playbooks" / "up.yml"), "-e", "idle_killer_tick_seconds=2",
             "-e", "idle_killer_first_boot_grace_seconds=0"],
            cwd=project, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            server = wait_until("the new server listed by Nova", lambda: next(iter(ours.servers()), None), 600, 0.1)
        finally:
            os.killpg(run.pid, signal.SIGKILL)  # the lid closes: up and everything it started
            run.wait(timeout=30)
        carried = json.loads(server.metadata["gpu_rent_killer"])  # the create's credential, from the first listing
        assert carried["f"], carried  # the address was taken before the create, and named to the killer
        active = wait_until(
            "the server ACTIVE without the laptop",
            lambda: next((s for s in ours.servers() if s.status == "ACTIVE"), None), 300, 0.5,
        )  # fmt: skip
        # The ground runs a server as a host only at a floating IP (ground/ext/gpu_rent_ground/agent.py); a real
        # cloud boots it without one. Up died before the attach: the test attaches the address as up would have.
        if not member_conn.network.get_ip(carried["f"]).port_id:
            port = next(member_conn.network.ports(device_id=active.id))
            member_conn.network.update_ip(carried["f"], port_id=port.id)
        volumes = {v.name: v.id for v in ours.volumes().values()}
        assert set(volumes) == {f"{name}-boot", f"{name}-data"}, volumes

        wait_until("the server deleted by the killer cloud-init installed", lambda: not ours.servers(), 300, 1)
        rootfs = GROUND / "state" / "hosts" / "rootfs" / volumes[f"{name}-boot"]
        words = json.loads((rootfs / paths.LAST_WORDS_FILE.lstrip("/")).read_text())
        assert words["server_id"] == active.id and words["acted"].startswith(f"asked Nova to delete server {active.id}")
        config = json.loads((rootfs / "root" / ".gpu-rent" / "idle-killer.json").read_text())
        # the first boot's config, the server taken from the metadata service: no arm ever ran
        assert config["server_id"] == active.id and config["swarmui_url"] == "", config
        assert config["credential_id"] == carried["c"]
        wait_until("its floating IP deleted by the killer", lambda: not ours.floating_ips(), 60)
        wait_until("both volumes free", lambda: all(v.status == "available" for v in ours.volumes().values()), 60)
        assert {v.name: v.id for v in ours.volumes().values()} == volumes  # the disks stay
    finally:
        destroyed = gpu_rent(project, "destroy", "--i-understand-data-loss")
        assert destroyed.returncode == 0, destroyed.stdout[-2000:] + destroyed.stderr[-2000:]
