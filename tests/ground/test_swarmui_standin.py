"""The SwarmUI stand-in is reachable by the target hosts, installs like SwarmUI and runs a real ComfyUI there."""

import json
import shlex

from tests.groundkit import ssh, wait_for_ssh, wait_until

GIT_URL = "git://10.231.7.1/SwarmUI.git"


def _api(address: str, route: str, body: dict) -> tuple[int, dict]:
    """HTTP code and JSON body of a SwarmUI API call made on the host."""
    out = ssh(address, f"curl -s -w '\\n%{{http_code}}' -X POST -H 'Content-Type: application/json' "
                       f"-d {shlex.quote(json.dumps(body))} http://127.0.0.1:7801/API/{route}").stdout  # fmt: skip
    text, _, code = out.rpartition("\n")
    return int(code), json.loads(text)


def test_a_host_clones_installs_and_runs_the_standin(cloud, net):
    server = cloud.server(net, cloud.volume(10, image=True), key_name=cloud.keypair())
    address = cloud.floating_ip(server)
    wait_for_ssh(address)
    install = (
        f"git clone -q {GIT_URL} /opt/swarmui && cd /opt/swarmui && git checkout -q 0.9.8.2-standin && "
        "bash launchtools/linux-dotnet-install.sh /root/.dotnet && "
        "bash launchtools/comfy-install-linux.sh nv && mkdir -p Data && "
        "printf 'IsInstalled: true\\nLaunchMode: none\\n' > Data/Settings.fds && "
        "printf '0:\\n    type: comfyui_selfstart\\n    title: ComfyUI\\n    enabled: true\\n    settings:\\n"
        "        StartScript: dlbackend/ComfyUI/main.py\\n        GPU_ID: 0\\n' > Data/Backends.fds && "
        "systemd-run --unit swarmui-test --setenv=HOME=/root --working-directory=/opt/swarmui "
        "./launch-linux.sh --launch_mode none --host 127.0.0.1 --port 7801"
    )
    result = ssh(address, install, timeout=300)
    assert result.returncode == 0, result.stderr
    code, session = wait_until("stand-in answers", lambda: _try(address), 120)
    assert code == 200 and session["user_id"] == "local" and "*" in session["permissions"]
    assert session["version"] == "0.9.8.2"  # upstream 062407c7's
    assert _api(address, "GetGlobalStatus", {"session_id": "nope"})[0] == 401  # src/WebAPI/API.cs
    status = wait_until(
        "backend running",
        lambda: (
            (s := _api(address, "GetGlobalStatus", {"session_id": session["session_id"]})[1])
            and s["backend_status"]["status"] == "running"
            and s
        ),
        60,
    )
    assert status["status"] == {"waiting_gens": 0, "loading_models": 0, "waiting_backends": 0, "live_gens": 0}
    listening = ssh(address, "ss -Hltn 'sport = :7801'").stdout.split()
    assert "127.0.0.1:7801" in listening and "0.0.0.0:7801" not in listening
    # the self-started ComfyUI: the venv's python on the first port GetNextPort gives
    comfy = ssh(address, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done").stdout
    assert "/opt/swarmui/dlbackend/ComfyUI/venv/bin/python3 -s main.py --port 7821" in comfy, comfy
    queue = ssh(address, "curl -s http://127.0.0.1:7821/prompt").stdout
    assert json.loads(queue) == {"exec_info": {"queue_remaining": 0}}


def _try(address: str):
    try:
        return _api(address, "GetNewSession", {})
    except (json.JSONDecodeError, ValueError):
        return None
