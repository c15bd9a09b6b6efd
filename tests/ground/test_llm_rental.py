"""gpu-rent up with LLM_RUNTIME=ollama on the ground (issue 17): one rental walks it in order.

Ollama is the stand-in of ground/ollama-standin (Ollama 0.32.15's API and layout; no real build fits CI),
installed through the llm_runtime role from its release archive, and the model comes from the registry
stand-in: both served on the ground bridge by molecule/llm_runtime/standin.py, as a mirror
(LLM_RELEASE_URL) and a registry of the user's own (ollama-models.yaml, insecure: true).
"""

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.ground.test_rental import Ours, gpu_rent, make_project, state, tunnel, up
from tests.groundkit import REPO, ssh, wait_for_ssh, wait_until
from tests.loopback_sshd import free_port

STANDIN = REPO / "molecule" / "llm_runtime" / "standin.py"
BRIDGE = "10.231.7.1"  # ground/lib.sh EXT_GW: where the ground hosts reach this machine


def http(url: str, method: str = "GET", body: dict | None = None, timeout: float = 30) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw.strip() else {}


class Rental:
    def __init__(self, project: Path, ours: Ours, served: dict, first: subprocess.CompletedProcess):
        self.project, self.ours, self.served, self.first = project, ours, served, first

    @property
    def address(self) -> str:
        return state(self.project)["resources"]["floating_ip_address"]

    @property
    def llm_url(self) -> str:
        return tunnel(self.project)["llm_url"]

    def registry(self, route: str, body: dict | None = None) -> dict:
        base = "http://" + self.served["model"].split("/", 1)[0]
        return http(base + route, "POST" if body is not None else "GET", body)

    def blob_gets(self) -> list[dict]:
        return [r for r in self.registry("/standin/stats")["requests"] if r["path"].startswith("/cdn/blobs/")]


@pytest.fixture(scope="module")
def rental(tmp_path_factory, member_conn):
    served_dir = tmp_path_factory.mktemp("llm-standin")
    started = subprocess.run([sys.executable, str(STANDIN), "start", "--dir", str(served_dir),
                              "--host", BRIDGE], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert started.returncode == 0, started.stderr
    served = json.loads(started.stdout)
    name = f"t{uuid.uuid4().hex[:6]}"
    project = make_project(tmp_path_factory.mktemp("llm"), name)
    try:
        with open(project / "gpu-rent.vars", "a") as f:
            f.write(f"LLM_RUNTIME=ollama\nLLM_LOCAL_PORT={free_port()}\nLLM_RELEASE_URL={served['release_url']}\n"
                    "IDLE_GRACE_MINUTES=0\n")  # fmt: skip
        (project / "ollama-models.yaml").write_text(
            f"ollama:\n  - name: {served['model']}\n    digest: {served['digest']}\n    insecure: true\n"
        )
        yield Rental(project, Ours(member_conn, name), served, up(project))
    finally:
        gpu_rent(project, "tunnel", "--close")
        gpu_rent(project, "destroy", "--i-understand-data-loss")
        subprocess.run([sys.executable, str(STANDIN), "stop", "--dir", str(served_dir)],
                       capture_output=True, timeout=60)  # fmt: skip


def test_up_installs_ollama_pulls_the_model_and_the_tunnel_reaches_it(rental):
    first = rental.first
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert state(rental.project)["phase"] == "ready_tunneled"
    record = tunnel(rental.project)
    assert record["llm_url"].startswith("http://127.0.0.1:") and record["llm_url"] in first.stdout
    # through the tunnel, on this machine's port: the model, with the manifest the registry gave
    models = http(f"{rental.llm_url}/api/tags")["models"]
    assert [(m["name"], "sha256:" + m["digest"]) for m in models] == [(rental.served["model"], rental.served["digest"])]
    assert http(f"{rental.llm_url}/api/version")["version"] == "0.32.15"
    # each blob came once, whole
    gets = rental.blob_gets()
    assert sum(g["bytes"] for g in gets) >= rental.served["size"] and all(g["status"] in (200, 206) for g in gets)
    wait_for_ssh(rental.address)
    look = "systemctl is-active ollama; systemctl is-enabled ollama; findmnt -no TARGET --target /mnt/swarm_data/ollama"
    on_vm = ssh(rental.address, f"{look}; ss -ltnH 'sport = :11434'")
    lines = on_vm.stdout.splitlines()
    assert lines[:3] == ["active", "enabled", "/mnt/swarm_data"], on_vm
    assert [line.split()[3] for line in lines[3:]] == ["127.0.0.1:11434"]  # never the network
    assert "gpu-rent status" not in first.stderr
    shown = gpu_rent(rental.project, "status")
    assert rental.llm_url in shown.stdout, shown.stdout


def test_a_second_up_pulls_nothing(rental):
    before = rental.blob_gets()
    again = up(rental.project)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert rental.blob_gets() == before
    assert http(f"{rental.llm_url}/api/tags")["models"][0]["name"] == rental.served["model"]


def test_a_pull_cut_short_resumes_where_it_stopped(rental):
    """The model removed, then pulled by seed-llm slowly; the pull is cut midway (its client on the VM killed,
    as when the run that started it dies): that seed-llm fails naming the model, Ollama keeps what came
    (server/download.go writes the part's progress when its copy is canceled), and the next one asks the
    registry from there on. (A SIGKILLed Ollama itself keeps only finished parts of 100 MB or more, as upstream.)"""
    model, size = rental.served["model"], rental.served["size"]
    http(f"{rental.llm_url}/api/delete", "DELETE", {"model": model})
    assert http(f"{rental.llm_url}/api/tags")["models"] == []
    seen = len(rental.registry("/standin/stats")["requests"])
    rental.registry("/standin/throttle", {"bytes_per_second": 250_000})  # ~16 s for the model
    command = [str(Path(sys.executable).parent / "gpu-rent"), "seed-llm"]
    seeding = subprocess.Popen(command, cwd=rental.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        partial = "find /mnt/swarm_data/ollama/blobs -name '*-partial' -size +1000k | head -1"
        wait_until("a partial blob past 1 MB", lambda: ssh(rental.address, partial).stdout.strip(), 120, 1)
        killed = ssh(rental.address, "pkill -KILL -f 'llm_pull.py pull'")
        assert killed.returncode == 0, killed.stderr
        out, err = seeding.communicate(timeout=600)
    finally:
        seeding.kill()
        rental.registry("/standin/throttle", {"bytes_per_second": 0})
    assert seeding.returncode != 0 and model in out + err, out[-3000:] + err[-3000:]
    again = gpu_rent(rental.project, "seed-llm")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert [m["name"] for m in http(f"{rental.llm_url}/api/tags")["models"]] == [model]
    after = [r for r in rental.registry("/standin/stats")["requests"][seen:] if r["path"].startswith("/cdn/blobs/")]
    resumed = [
        r for r in after if (r.get("range") or "").startswith("bytes=") and not r["range"].startswith("bytes=0-")
    ]
    assert resumed, after  # asked from where it stopped
    assert sum(r["bytes"] for r in after) < size * 1.5, after  # not the whole model again


def test_a_generation_keeps_the_vm_and_the_killer_names_it(rental):
    model = rental.served["model"]
    answer = http(f"{rental.llm_url}/api/generate", "POST", {"model": model, "prompt": "hi", "stream": False})
    assert answer["done"] is True
    loaded = http(f"{rental.llm_url}/api/ps")["models"]
    assert [m["name"] for m in loaded] == [model]
    after = time.time()
    assert ssh(rental.address, "systemctl start gpu-rent-idle-killer.service").returncode == 0  # one tick now
    said = wait_until(
        "the killer's tick",
        lambda: (
            (r := ssh(rental.address, "cat /run/gpu-rent/idle-killer.json")).returncode == 0
            and (s := json.loads(r.stdout)).get("tick_at", 0) > after
            and s
        ),
        60,
        1,
    )
    assert said["reason"].startswith(f"LLM runtime: model {model} loaded"), said
    assert rental.ours.servers()[0].status == "ACTIVE"
