"""The SwarmUI stand-in is reachable by the target hosts and installs like SwarmUI."""

import json

from tests.groundkit import ssh, wait_for_ssh, wait_until

GIT_URL = "git://10.231.7.1/SwarmUI.git"


def _api(address: str, route: str, body: dict) -> dict:
    out = ssh(address, f"curl -s -X POST -H 'Content-Type: application/json' -d '{json.dumps(body)}' "
                       f"http://127.0.0.1:7801/API/{route}").stdout  # fmt: skip
    return json.loads(out)


def test_a_host_clones_installs_and_runs_the_standin(cloud, net):
    server = cloud.server(net, cloud.volume(10, image=True), key_name=cloud.keypair())
    address = cloud.floating_ip(server)
    wait_for_ssh(address)
    install = (
        f"git clone -q {GIT_URL} /opt/swarmui && cd /opt/swarmui && git checkout -q 0.9.7-standin && "
        "bash launchtools/comfy-install-linux.sh nv && mkdir -p Data && "
        "printf 'IsInstalled: true\\nLaunchMode: none\\n' > Data/Settings.fds && "
        "printf '0:\\n    type: comfyui_selfstart\\n    title: ComfyUI\\n    enabled: true\\n    settings:\\n"
        "        StartScript: dlbackend/ComfyUI/main.py\\n        GPU_ID: 0\\n' > Data/Backends.fds && "
        "systemd-run --unit swarmui-test ./launch-linux.sh --launch_mode none --host 127.0.0.1 --port 7801"
    )
    result = ssh(address, install)
    assert result.returncode == 0, result.stderr
    session = wait_until("stand-in answers", lambda: _try(address), 30)
    assert session["user_id"] == "local" and "*" in session["permissions"]
    status = wait_until(
        "backend running",
        lambda: (
            (s := _api(address, "GetGlobalStatus", {"session_id": session["session_id"]}))
            and s["backend_status"]["status"] == "running"
            and s
        ),
        30,
    )
    assert status["status"] == {"waiting_gens": 0, "loading_models": 0, "waiting_backends": 0, "live_gens": 0}
    listening = ssh(address, "ss -Hltn 'sport = :7801'").stdout.split()
    assert "127.0.0.1:7801" in listening and "0.0.0.0:7801" not in listening


def _try(address: str):
    try:
        return _api(address, "GetNewSession", {})
    except json.JSONDecodeError:
        return None
