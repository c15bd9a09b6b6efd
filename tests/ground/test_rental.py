"""gpu-rent up / stop / destroy / status on the ground, as the member user.

One project folder walks the whole life in order: bad input, up, re-up,
stop, up again (now with LLM_RUNTIME=ollama), a direct playbook stop, orphans,
destroy. Every step checks the cloud itself, never only what the CLI printed.

It stays one file past 500 lines because its tests are one rental's life in
order (each starts where the one before left the VM): split, the halves would
each rent, and a rental is the dearest thing the suite does. The LLM runtime
(issue 17) rides the same life: the up after stop turns it on, the preemption's
up shows a second up pulls nothing, and the idle-killer's test sees a
generation keep the VM before the unloaded model lets it go.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from websockets.sync.client import connect as ws_connect

from gpu_rent.cloud import plain_http as cloud_http
from gpu_rent.cloud import route as cloud_route
from gpu_rent.cloud import view as cloud
from gpu_rent.project import settings as config
from tests.groundkit import CLOUDS_YAML, PROJECT, REPO, killer_credentials, ssh, wait_for_ssh, wait_until
from tests.loopback_sshd import free_port

BIN = Path(sys.executable).parent
OPERATOR_CIDR = "10.231.7.1/32"
BRIDGE = "10.231.7.1"  # ground/lib.sh EXT_GW: where the ground hosts reach this machine
# Ollama's stand-in (ground/ollama-standin: 0.32.15's API and layout; no real build fits CI) as a release
# mirror (LLM_RELEASE_URL) and a registry of the user's own (ollama-models.yaml, insecure: true)
LLM_STANDIN = REPO / "molecule" / "llm_runtime" / "standin.py"


def gpu_rent(project: Path, *args: str, shell: dict | None = None) -> subprocess.CompletedProcess:
    """gpu-rent ARGS in the project folder; shell: OS_* and the like exported in the user's shell besides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))} | (shell or {})
    return subprocess.run(
        [str(BIN / "gpu-rent"), *args], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )


def playbook(project: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook <repo>/playbooks/NAME from the project folder, as an operator runs it: no flags needed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_", "ANSIBLE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["ansible-playbook", str(REPO / "playbooks" / name), *args],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def state(project: Path) -> dict:
    return json.loads((project / ".gpu-rent" / "state.json").read_text())


def status(project: Path) -> dict:
    result = gpu_rent(project, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def last_up_log(project: Path) -> str:
    """The playbook output of the project's newest up, as gpu-rent kept it."""
    return sorted((project / ".gpu-rent" / "logs").glob("*-up.log"))[-1].read_text()


def make_project(tmp: Path, name: str) -> Path:
    """A copy of the ground's project with its own NAME and its own tunnel port (tests run side by side)."""
    project = tmp / name
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".gpu-rent"))  # a new project: no state
    with open(project / "gpu-rent.vars", "a") as f:
        f.write(f"NAME={name}\nLOCAL_PORT={free_port()}\n")
    return project


def up(project: Path) -> subprocess.CompletedProcess:
    """gpu-rent up, its watchdog looking every 2 s (30 s by default) so that tests see it act."""
    return gpu_rent(project, "up", "--yes", "--watch-seconds", "2")


def tunnel(project: Path) -> dict:
    """The record of the project's running tunnel process (failing when none runs)."""
    record = json.loads((project / ".gpu-rent" / "tunnel.json").read_text())
    assert record["state"] != "closed", record
    os.kill(record["pid"], 0)
    return record


def through_tunnel(project: Path, route: str = "/API/GetNewSession", body: dict | None = None) -> dict:
    request = urllib.request.Request(  # SwarmUI answers 400 "Wrong content type" to anything but JSON
        f"{tunnel(project)['url']}{route}", json.dumps(body or {}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def http(url: str, method: str = "GET", body: dict | None = None, timeout: float = 30) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw.strip() else {}


class LlmServed:
    """The release mirror and model registry the life's LLM runtime is installed and pulled from."""

    def __init__(self, served: dict):
        self.release_url, self.model, self.digest, self.size = (
            served["release_url"], served["model"], served["digest"], served["size"]
        )  # fmt: skip
        # llama.cpp's stand-in release (ground/llamacpp-standin) and a GGUF file, served beside Ollama's
        self.llamacpp_release_url, self.gguf_url, self.gguf_sha256 = (
            served["llamacpp_release_url"], served["gguf_url"], served["gguf_sha256"]
        )  # fmt: skip
        self.release_log = Path(served["release_log"])
        self.first_up: subprocess.CompletedProcess | None = None  # the up that turned the runtime on

    def registry(self, route: str, body: dict | None = None) -> dict:
        base = "http://" + self.model.split("/", 1)[0]
        return http(base + route, "POST" if body is not None else "GET", body)

    def gets(self, url: str) -> int:
        """GETs of a file the release server answered (http.server logs one line per request)."""
        path = "/" + url.split("/", 3)[3]
        return sum(f'"GET {path} ' in line for line in self.release_log.read_text().splitlines())

    def blob_gets(self, since: int = 0) -> list[dict]:
        requests = self.registry("/standin/stats")["requests"][since:]
        return [r for r in requests if r["path"].startswith("/cdn/blobs/")]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Ours:
    """Everything in the cloud whose name says it belongs to one project."""

    def __init__(self, conn, name: str):
        self.conn, self.name = conn, name

    def servers(self):
        # DELETED: listed a few seconds after a stop, which ends there as openstacksdk's wait_for_delete does
        return [s for s in self.conn.compute.servers(details=True) if s.name == self.name and s.status != "DELETED"]

    def volumes(self):
        return {v.name: v for v in self.conn.block_storage.volumes() if v.name.startswith(f"{self.name}-")}

    def floating_ips(self):
        return [ip for ip in self.conn.network.ips() if ip.description == f"gpu-rent {self.name}"]

    def killer_credential(self):
        """The idle-killer's application credential of this project, or None."""
        found = killer_credentials(self.conn, f"{self.name}-idle-killer")
        assert len(found) <= 1, found
        return found[0] if found else None

    def ids(self) -> set[str]:
        """Ids of every server, volume and floating IP of this project now."""
        return (
            {s.id for s in self.servers()}
            | {v.id for v in self.volumes().values()}
            | {ip.id for ip in self.floating_ips()}
        )

    def everything(self) -> dict:
        n = self.name
        return {
            "servers": [s.id for s in self.servers()],
            "volumes": sorted(self.volumes()),
            "floating_ips": [ip.id for ip in self.floating_ips()],
            "networks": [x.name for x in self.conn.network.networks() if x.name.startswith(f"{n}-")],
            "routers": [x.name for x in self.conn.network.routers() if x.name.startswith(f"{n}-")],
            "security_groups": [x.name for x in self.conn.network.security_groups() if x.name.startswith(f"{n}-")],
            "keypairs": [x.name for x in self.conn.compute.keypairs() if x.name.startswith(f"{n}-")],
            "snapshots": [x.name for x in self.conn.block_storage.snapshots() if x.name.startswith(f"{n}-")],
        }


NOTHING = {
    k: []
    for k in ("servers", "volumes", "floating_ips", "networks", "routers", "security_groups", "keypairs", "snapshots")
}


@pytest.fixture(scope="module")
def life(tmp_path_factory, member_conn):
    name = f"t{uuid.uuid4().hex[:6]}"
    project = make_project(tmp_path_factory.mktemp("my rental"), name)  # a blank in the path, as on Windows
    # gpu.a100.1 has no valid host, gpu.h100.8 is over the project's core quota: l4 is the third choice
    settings = (project / "gpu-rent.vars").read_text()
    chain = "FLAVOR_FALLBACK=gpu.h100.8,gpu.l4.1,gpu.a10.1\n"
    (project / "gpu-rent.vars").write_text(re.sub(r"^FLAVOR_FALLBACK=.*\n", chain, settings, flags=re.M))
    yield project, Ours(member_conn, name)
    gpu_rent(project, "tunnel", "--close")
    gpu_rent(project, "destroy", "--i-understand-data-loss")


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    served_dir = tmp_path_factory.mktemp("llm-standin")
    started = subprocess.run([sys.executable, str(LLM_STANDIN), "start", "--dir", str(served_dir),
                              "--host", BRIDGE], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert started.returncode == 0, started.stderr
    yield LlmServed(json.loads(started.stdout))
    subprocess.run([sys.executable, str(LLM_STANDIN), "stop", "--dir", str(served_dir)],
                   capture_output=True, timeout=60)  # fmt: skip


def llm_url(project: Path) -> str:
    return tunnel(project)["llm_url"]


def test_bad_config_creates_nothing(tmp_path, member_conn):
    project = make_project(tmp_path, f"t{uuid.uuid4().hex[:6]}")
    with open(project / "gpu-rent.vars", "a") as f:
        f.write("DATA_VOLUME_GIB=8\n")
    result = gpu_rent(project, "up", "--yes")
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()
        == ["error: gpu-rent.vars:19: unknown key DATA_VOLUME_GIB (did you mean DATA_VOLUME_GB?)"]
        or "DATA_VOLUME_GIB" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert Ours(member_conn, project.name).everything() == NOTHING


def test_up_rents_exactly_the_resources_of_the_spec(life):
    project, ours = life
    result = up(project)
    assert result.returncode == 0, result.stderr
    assert "at most 1.35/hour" in result.stdout  # said what it rents and what it costs, before renting
    s = state(project)
    assert s["phase"] == "ready_tunneled"
    assert s["flavor"] == "gpu.l4.1"  # gpu.a100.1: no valid host; gpu.h100.8: over the quota
    assert s["pool"] == "ru-7a"
    log = last_up_log(project)
    assert "No valid host" in log and "Quota exceeded" in log

    servers = ours.servers()
    assert len(servers) == 1  # the failed attempts were deleted
    server = servers[0]
    assert server.status == "ACTIVE" and sorted(server.tags) == ["gpu-rent", "preemptible"]
    assert server.id == s["resources"]["server"] and server.availability_zone == "ru-7a"
    attachments = ours.conn.compute.get(f"/servers/{server.id}/os-volume_attachments", microversion="2.79").json()
    attached = {a["volumeId"]: a for a in attachments["volumeAttachments"]}
    volumes = ours.volumes()
    boot, data = volumes[f"{ours.name}-boot"], volumes[f"{ours.name}-data"]
    assert set(volumes) == {boot.name, data.name}
    assert set(attached) == {boot.id, data.id} == {s["resources"]["boot_volume"], s["resources"]["data_volume"]}
    assert all(a["delete_on_termination"] is False for a in attached.values())
    assert boot.is_bootable and boot.size == 10 and data.size == 4 and boot.availability_zone == "ru-7a"

    group = ours.conn.network.find_security_group(f"{ours.name}-ssh")
    ingress = [
        r for r in ours.conn.network.security_group_rules(security_group_id=group.id) if r.direction == "ingress"
    ]
    assert [(r.protocol, r.port_range_min, r.port_range_max, r.remote_ip_prefix) for r in ingress] == [
        ("tcp", 22, 22, OPERATOR_CIDR)
    ]
    assert server.security_groups == [{"name": group.name}]

    ips = ours.floating_ips()
    assert len(ips) == 1 and ips[0].floating_ip_address == s["resources"]["floating_ip_address"]
    assert ips[0].port_id and next(ours.conn.network.ports(device_id=server.id)).id == ips[0].port_id
    assert ours.conn.compute.find_keypair(f"{ours.name}-key") is not None
    assert ours.everything()["networks"] == [f"{ours.name}-net-ru-7a"]
    assert ours.everything()["routers"] == [f"{ours.name}-router-ru-7a"]
    # the one snapshot of a boot volume that reached ready
    assert ours.everything()["snapshots"] == [f"{ours.name}-boot-ok"]
    assert s["resources"]["snapshot"] == ours.conn.block_storage.find_snapshot(f"{ours.name}-boot-ok").id

    # on the VM (with the user's key): SwarmUI up on 127.0.0.1 over the data volume
    address = ips[0].floating_ip_address
    wait_for_ssh(address)
    on_vm = ssh(address, "systemctl is-active swarmui; findmnt -no SOURCE,TARGET /mnt/swarm_data; "
                         "findmnt -no TARGET /opt/swarmui/Models; ss -ltnH 'sport = :7801'")  # fmt: skip
    lines = on_vm.stdout.splitlines()
    assert lines[0] == "active"
    assert lines[1].endswith("/mnt/swarm_data") and lines[2] == "/opt/swarmui/Models"
    assert [line.split()[3] for line in lines[3:]] == ["127.0.0.1:7801"]
    # LLM_RUNTIME is none unless set: no runtime installed, nothing on its port, no second forward
    no_llm = ssh(address, "ls /usr/local/bin/ollama /etc/systemd/system/ollama.service /mnt/swarm_data/ollama; "
                          "ss -ltnH 'sport = :11434' | wc -l")  # fmt: skip
    assert no_llm.stdout.split() == ["0"] and no_llm.stderr.count("No such file") == 3, no_llm
    assert tunnel(project).get("llm_url") is None


def test_up_opens_the_tunnel_to_swarmui_on_the_vm_and_websockets_pass(life):
    project, _ = life
    record = tunnel(project)
    port = int(record["url"].rsplit(":", 1)[1])
    assert record["state"] == "forwarding" and port != 7801  # the laptop's own SwarmUI port is never taken
    session = through_tunnel(project)
    # the stand-in answers as upstream 0.9.8.2 does (the ground's tag 0.9.8.2-standin)
    assert session["user_id"] == "local" and session["version"] == "0.9.8.2"
    counters = through_tunnel(project, "/API/GetGlobalStatus", {"session_id": session["session_id"]})["status"]
    assert counters == {"waiting_gens": 0, "loading_models": 0, "waiting_backends": 0, "live_gens": 0}
    with ws_connect(f"ws://127.0.0.1:{port}/StandinTest/EchoWS", open_timeout=10) as ws:
        ws.send("через туннель")
        assert ws.recv(timeout=10) == "через туннель"
    shown = gpu_rent(project, "status")
    assert f"tunnel    {record['url']} forwarding" in shown.stdout and "phase     ready_tunneled" in shown.stdout
    assert status(project)["tunnel"]["pid"] == record["pid"]


def status_imports(project: Path) -> tuple[dict, set[str]]:
    """gpu-rent status --json, and the top-level packages its process imported (PYTHONPROFILEIMPORTTIME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    result = subprocess.run([str(BIN / "gpu-rent"), "status", "--json"], cwd=project, capture_output=True, text=True,
                            env=env | {"PYTHONPROFILEIMPORTTIME": "1"}, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    return json.loads(result.stdout), {line.split("|")[-1].strip().split(".")[0] for line in lines}


def timeless(said: dict) -> dict:
    """status --json but what moves between two runs a second apart whichever way status reads the cloud: the
    minutes alive (rounded differently), the running tunnel's heartbeat (watchdog.py's _update: when it last
    wrote its record, how many connections it has forwarded) and how far the VM's clock is ahead of the laptop's
    (killer_view.finish: measured at each read)."""
    steady = {k: v for k, v in said.items() if k != "minutes_alive"}
    if isinstance(said.get("tunnel"), dict):
        steady["tunnel"] = {k: v for k, v in said["tunnel"].items() if k not in ("forwarded", "updated_at")}
    if isinstance(said.get("idle_killer"), dict) and isinstance(said["idle_killer"].get("status"), dict):
        killer = said["idle_killer"]["status"]
        steady["idle_killer"] = {
            **said["idle_killer"],
            "status": {k: v for k, v in killer.items() if k != "vm_clock_ahead"},
        }
    return steady


def test_status_over_plain_http_sees_and_says_what_it_says_through_the_sdk(life, monkeypatch):
    """status's fast path (cloud_http, along the route a status through openstacksdk kept) reads the same view and
    says the same; a changed byte in the project's clouds.yaml sends it through the SDK, which keeps a new route."""
    project, ours = life
    route_file = project / ".gpu-rent" / cloud_route.FILE
    env_file, clouds = project / ".env", project / "clouds.yaml"  # the project's own copy: the ground's is shared
    dotenv = env_file.read_text()
    for var in [v for v in os.environ if v.startswith(("OS_", "GPU_RENT_"))]:  # config.load as gpu-rent (above) sees it
        monkeypatch.delenv(var)
    try:
        shutil.copy(CLOUDS_YAML, clouds)
        env_file.write_text(re.sub(r"^OS_CLIENT_CONFIG_FILE=.*", f"OS_CLIENT_CONFIG_FILE={clouds}", dotenv, flags=re.M))
        said, imported = status_imports(project)  # another clouds.yaml: a miss, so through the SDK
        assert "openstack" in imported and said["server"]["status"] == "ACTIVE" and said["floating_ip"]
        kept = json.loads(route_file.read_text())
        said, imported = status_imports(project)
        assert not imported & {"openstack", "keystoneauth1", "requests"}, imported
        assert json.loads(route_file.read_text())["salt"] == kept["salt"]  # read along it, not rewritten

        # the view: the SDK's before and after the plain one, until nothing changed between them (a shared ground)
        monkeypatch.chdir(project)  # the route is the working folder's too, and gpu-rent ran in the project
        settings = config.load(project)
        route = cloud_route.load(settings.cloud, settings.runtime_dir)
        assert route is not None and route.cloud == said["cloud"]
        for _ in range(3):
            before = cloud.observe(ours.conn, settings.name)
            fast = cloud_http.observe(route, settings.name)
            after = cloud.observe(ours.conn, settings.name)
            if before == replace(after, taken_at=before.taken_at):
                break
        assert fast == replace(before, taken_at=fast.taken_at)
        assert fast.server(settings.name).addresses == (said["floating_ip"],)

        # status's words: along the route, then without it (through the SDK), then along the new one
        for _ in range(3):
            along, _ = status_imports(project)
            route_file.unlink()
            through, imported = status_imports(project)
            assert "openstack" in imported and route_file.exists()
            again, imported = status_imports(project)
            assert "openstack" not in imported
            if timeless(along) == timeless(again):  # the killer's minute did not turn in between
                break
        assert timeless(through) == timeless(along)
        assert abs(through["minutes_alive"] - along["minutes_alive"]) < 1

        salt = json.loads(route_file.read_text())["salt"]
        clouds.write_text(clouds.read_text().replace("clouds:", "clouds: ", 1))  # one byte more, the same clouds
        said, imported = status_imports(project)
        assert "openstack" in imported and json.loads(route_file.read_text())["salt"] != salt
    finally:
        env_file.write_text(dotenv)
        clouds.unlink(missing_ok=True)


def test_a_killed_tunnel_connection_reconnects_and_requests_work_again(life):
    project, _ = life
    record = tunnel(project)
    address = state(project)["resources"]["floating_ip_address"]
    log = project / ".gpu-rent" / "logs" / "tunnel.log"
    before = log.read_text().count("SSH connected again")
    # the tunnel's connection holds a terminal (sshd: root@pts/N); this test's own ssh holds none
    assert ssh(address, "pkill -KILL -f 'sshd: root@[p]ts'").returncode == 0
    wait_until("the tunnel to reconnect", lambda: log.read_text().count("SSH connected again") > before, 60)
    assert through_tunnel(project)["session_id"]
    assert tunnel(project)["pid"] == record["pid"]  # the same process: the browser's port never closed


def test_ssh_logs_and_open_reach_the_vm_with_the_pinned_key(life, tmp_path):
    project, ours = life
    shell = gpu_rent(project, "ssh", "--", "cat", "/etc/hostname")
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.strip() == ours.name  # the VM's hostname is its server name
    journal = gpu_rent(project, "logs", "-n", "50")
    assert journal.returncode == 0, journal.stderr
    assert "gpu-rent-idle-killer" in journal.stdout and "POST /API/" in journal.stdout  # both units
    killer_only = gpu_rent(project, "logs", "--unit", "killer", "-n", "20")
    assert "POST /API/" not in killer_only.stdout and "keep: " in killer_only.stdout
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    done = subprocess.run([str(BIN / "gpu-rent"), "open"], cwd=project, env={**env, "BROWSER": str(browser)},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_until("the browser to be started", opened.exists, 10)
    assert opened.read_text().strip() == tunnel(project)["url"]


def test_push_sends_the_project_folders_once_and_pull_output_brings_new_outputs(life):
    project, _ = life
    address = state(project)["resources"]["floating_ip_address"]
    lora = project / "Models" / "Lora" / "стиль ✓.safetensors"
    lora.parent.mkdir(parents=True)
    lora.write_bytes(os.urandom(5 * 1024 * 1024 + 7))  # big enough to stream, as a model does
    (project / "Wildcards").mkdir()
    (project / "Wildcards" / "colors.txt").write_text("red\ngreen\n")
    first = gpu_rent(project, "push")
    assert first.returncode == 0, first.stderr
    assert "pushed: 2 files" in first.stdout and "workflows: no such folder here, skipped" in first.stderr
    on_vm = ssh(
        address, "sha256sum '/opt/swarmui/Models/Lora/стиль ✓.safetensors' /mnt/swarm_data/Data/Wildcards/colors.txt"
    )
    assert on_vm.stdout.split()[0] == hashlib.sha256(lora.read_bytes()).hexdigest()
    assert "colors.txt" in on_vm.stdout
    again = gpu_rent(project, "push")
    assert again.returncode == 0 and "pushed: 0 files (0.0 MB), 2 unchanged" in again.stdout
    day = "/mnt/swarm_data/Output/local/raw/2026-11-30"
    made = f"mkdir -p {day} && head -c 300000 /dev/urandom > '{day}/0001-a cat.png' && sha256sum {day}/*"
    digest = ssh(address, made).stdout.split()[0]
    pulled = gpu_rent(project, "pull-output")
    assert pulled.returncode == 0, pulled.stderr
    image = project / "Output" / "local" / "raw" / "2026-11-30" / "0001-a cat.png"
    assert hashlib.sha256(image.read_bytes()).hexdigest() == digest
    assert "pulled" in pulled.stdout and "1 file" in pulled.stdout
    assert "0 files" in gpu_rent(project, "pull-output").stdout


# The tasks a second up skips: what they would make, up's lookup found exactly so.
LOOKED_UP_ENSURES = (
    "keypair : Upload the public key, replacing an outdated one.",
    "security_group : Create the security group with SSH from the operator only.",
    "network : Create the private network.",
    "network : Create the subnet.",
    "network : Create the router to the external network.",
)


def test_a_second_up_changes_nothing_in_the_cloud(life):
    project, ours = life
    before = ours.everything()
    pid = tunnel(project)["pid"]
    result = up(project)
    assert result.returncode == 0, result.stderr
    assert "changed: cloud 0, VM 0" in result.stdout
    assert ours.everything() == before
    # what up's one lookup found as wanted is not asked again, each by a module of its own
    log = last_up_log(project)
    ran = {task: re.findall(rf"TASK \[{re.escape(task)}\] \**\n(\w+):", log) for task in LOOKED_UP_ENSURES}
    assert all(results == ["skipping"] for results in ran.values()), ran
    assert tunnel(project)["pid"] == pid and state(project)["phase"] == "ready_tunneled"  # kept, not doubled


def test_ups_one_lookup_answers_as_the_info_modules_do(life):
    """rental_lookup (one login for a warm up's lookups) against compute_flavor_info, keypair_info,
    volume_info, volume_snapshot_info, networks_info, subnets_info, routers_info, port_info,
    security_group_info and server_info on the same rental."""
    project, _ = life
    parity = REPO / "tests" / "ground" / "playbooks" / "lookup_parity.yml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_", "ANSIBLE_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env['PATH']}", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_VARS_PLUGINS=str(REPO / "playbooks" / "vars_plugins"))  # fmt: skip
    result = subprocess.run(["ansible-playbook", str(parity)], cwd=project, env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert "ok=14" in result.stdout and "failed=0" in result.stdout


def test_resize_data_grows_the_volume_and_its_filesystem_on_the_running_vm(life):
    project, ours = life
    address = state(project)["resources"]["floating_ip_address"]
    marker = ssh(address, "echo kept > /mnt/swarm_data/Output/before-resize.txt").returncode
    assert marker == 0

    result = gpu_rent(project, "resize-data", "--gb", "6")
    assert result.returncode == 0, result.stderr
    assert ours.volumes()[f"{ours.name}-data"].size == 6
    df = ssh(address, "df --output=size -B1M /mnt/swarm_data | tail -1; cat /mnt/swarm_data/Output/before-resize.txt")
    size_mb, kept = df.stdout.split()
    assert kept == "kept"
    # online where the VM may (root on a real VM); the ground's hosts lack CAP_SYS_RESOURCE for a
    # mounted ext4, so there the user is told it grows at the next up (checked after stop and up)
    assert int(size_mb) > 5 * 1024 or "grows at the next up" in result.stderr, result.stderr

    smaller = gpu_rent(project, "resize-data", "--gb", "5")
    assert smaller.returncode == 2
    assert "volumes only grow" in smaller.stderr and len(smaller.stderr.strip().splitlines()) == 1
    assert ours.volumes()[f"{ours.name}-data"].size == 6


def test_seed_models_brings_a_checked_model_with_progress_and_no_token_in_any_artifact(life):
    import hashlib

    from tests.ground.test_seed import FileServer

    project, _ = life
    model = os.urandom(6 * 1024 * 1024)
    files = FileServer()  # on the ground bridge, where the VM reaches it
    token = f"civitai-{uuid.uuid4().hex}"
    env_text = (project / ".env").read_text()
    try:
        url = files.add("/models/seed-test.safetensors", model)
        files.rate["/models/seed-test.safetensors"] = 2 * 1024 * 1024  # slow enough to be followed
        digest = hashlib.sha256(model).hexdigest()
        (project / "seed.yml").write_text(f"models:\n  - {{url: '{url}', sha256: '{digest}', folder: Lora}}\n")
        (project / ".env").write_text(env_text + f"CIVITAI_TOKEN={token}\n")
        result = gpu_rent(project, "seed-models")
        assert result.returncode == 0, result.stderr
        assert "seeded models: 1 entry" in result.stdout
        assert "models: seed-test.safetensors" in result.stderr  # progress lines reached the user
        address = state(project)["resources"]["floating_ip_address"]
        landed = ssh(address, "sha256sum /mnt/swarm_data/Models/Lora/seed-test.safetensors").stdout.split()
        assert landed and landed[0] == digest  # through the bind mount, on the data volume
        again = gpu_rent(project, "seed-models")
        assert again.returncode == 0 and len(files.seen) == 1  # present and checked: not fetched again
        written = [p for p in (project / ".gpu-rent").rglob("*") if p.is_file()]
        assert [str(p) for p in written if token.encode() in p.read_bytes()] == []
    finally:
        files.close()
        (project / ".env").write_text(env_text)
        (project / "seed.yml").unlink(missing_ok=True)


def test_hold_writes_the_time_and_server_the_idle_killer_honours_and_clear_removes_it(life):
    project, _ = life
    address = state(project)["resources"]["floating_ip_address"]
    before = time.time()
    result = gpu_rent(project, "hold", "--minutes", "90")
    assert result.returncode == 0, result.stderr
    held, made_for = ssh(address, "cat /mnt/swarm_data/.gpu-rent-hold-until").stdout.split()
    assert before + 90 * 60 - 2 <= int(held) <= time.time() + 90 * 60 + 2
    assert made_for == state(project)["resources"]["server"]  # it ends with this server (idle_look.read_hold)
    cleared = gpu_rent(project, "hold", "--clear")
    assert cleared.returncode == 0, cleared.stderr
    assert ssh(address, "test -e /mnt/swarm_data/.gpu-rent-hold-until").returncode == 1
    # a long hold left in place when the VM goes: the next up's VM must not be held by it (test_up_after_stop_...)
    assert gpu_rent(project, "hold", "--minutes", "600").returncode == 0
    assert ssh(address, "systemctl start gpu-rent-idle-killer.service").returncode == 0  # a tick now, not in 60 s
    view = status(project)["idle_killer"]["view"]
    assert re.match(r"armed, kept alive by: hold for (599|600) min more", view), view


def test_stop_deletes_server_and_floating_ip_and_keeps_both_volumes(life):
    project, ours = life
    volumes = {v.name: v.id for v in ours.volumes().values()}
    rented = ours.ids()
    server = ours.servers()[0]
    pid = tunnel(project)["pid"]
    address = state(project)["resources"]["floating_ip_address"]
    ssh(address, "echo last > /mnt/swarm_data/Output/local/raw/2026-11-30/0002-last.png")
    result = gpu_rent(project, "stop")
    assert result.returncode == 0, result.stderr
    # PULL_OUTPUT: the newest output came home before the VM went
    assert (project / "Output" / "local" / "raw" / "2026-11-30" / "0002-last.png").read_text() == "last\n"
    assert gone(pid) and f"tunnel closed (pid {pid})" in result.stderr  # closed before the server went
    assert ours.servers() == [] and ours.floating_ips() == []
    after = ours.volumes()
    assert {v.name: v.id for v in after.values()} == volumes
    assert all(v.status == "available" for v in after.values())
    assert state(project)["phase"] == "idle"
    # none of what this project rented is a leftover (other tests' resources of the moment may be)
    seen = status(project)
    assert rented.isdisjoint(x["id"] for x in seen["leftovers"])
    end = seen["last_end"]
    assert end["server_id"] == server.id and end["line"].startswith("deleted by gpu-rent stop"), end
    assert ours.killer_credential() is None  # no secret outlives the VM that held it


def test_up_after_stop_reuses_the_same_volumes(life, llm):
    project, ours = life
    volumes = {v.name: v.id for v in ours.volumes().values()}
    # this up also turns the LLM runtime on: the tests after it look at what it installed and pulled
    with open(project / "gpu-rent.vars", "a") as f:
        f.write(f"LLM_RUNTIME=ollama\nLLM_LOCAL_PORT={free_port()}\nLLM_RELEASE_URL={llm.release_url}\n")
    (project / "ollama-models.yaml").write_text(
        f"ollama:\n  - name: {llm.model}\n    digest: {llm.digest}\n    insecure: true\n"
    )
    llm.first_up = up(project)
    assert llm.first_up.returncode == 0, llm.first_up.stdout[-3000:] + llm.first_up.stderr[-3000:]
    # a warm restart: gpu-rent up asked the lookup and the server (up_head_start.py) before the playbook
    # started, which took the answer from the file, not from the module; the server role adopted it, once
    log = last_up_log(project)
    assert re.search(r"TASK \[Look up what earlier ups made[^\]]*\] \**\nskipping: \[localhost\]", log), log[:3000]
    assert re.search(r"TASK \[Take what was looked up, here or by gpu-rent up[^\]]*\] \**\nok: ", log), log[:3000]
    assert not (project / ".gpu-rent" / "up-found.json").exists()  # handed for the playbook's run only
    # one task per flavor of the settings. The first took the lookup's server: it adopted it, or (the ground
    # full of other tests' servers) deleted the one Nova failed and said not placed; then each next flavor
    # ran until one placed, and the rest skipped.
    tried = re.findall(r"TASK \[server : Create the server from the existing volumes as [^\]]*\] \**\n(\w+):", log)
    ran = [r for r in tried if r != "skipping"]
    assert ran[:1] == ["changed"] and ran[-1] == "changed", tried
    assert tried[len(ran) :] == ["skipping"] * (len(tried) - len(ran)), tried
    assert log.count(" not placed: ") == len(ran) - 1, tried
    # the killer's credential: handed by fresh_server the moment the server was ACTIVE (its metadata, where the
    # VM's killer takes it), so neither up's make on localhost nor the role's make over SSH ran
    late = re.findall(r"TASK \[Make the idle-killer's credential while the new server boots[^\]]*\] \**\n(\w+):", log)
    kept_or_made = re.findall(r"TASK \[idle_killer : Keep or make the credential [^\]]*\] \**\n(\w+):", log)
    assert late == ["skipping"] and kept_or_made == ["skipping"], (late, kept_or_made)
    # and once the arm proved it on the VM, taken out of the server's metadata again
    unhanded = re.findall(r"TASK \[idle_killer : Take the handed credential out of [^\]]*\] \**\n(\w+):", log)
    assert unhanded == ["changed"] and "gpu_rent_killer" not in ours.servers()[0].metadata, unhanded
    held = json.loads(
        ssh(state(project)["resources"]["floating_ip_address"], "cat /root/.gpu-rent/idle-killer.json").stdout
    )
    assert held["credential_id"] == ours.killer_credential().id and held["credential_secret"]
    s = state(project)
    assert {s["resources"]["boot_volume"], s["resources"]["data_volume"]} == set(volumes.values())
    [server] = ours.servers()
    assert sorted(ours.conn.compute.get_server(server.id).tags) == ["gpu-rent", "preemptible"]  # billed preemptible
    assert s["resources"]["server"] == server.id
    assert {v.name: v.id for v in ours.volumes().values()} == volumes
    # the data is there, on a filesystem as large as the volume resize-data grew
    check = "df --output=size -B1M /mnt/swarm_data | tail -1; cat /opt/swarmui/Output/before-resize.txt"
    on_vm = ssh(s["resources"]["floating_ip_address"], check)
    size_mb, kept = on_vm.stdout.split()
    assert int(size_mb) > 5 * 1024 and kept == "kept"
    # the 600-minute hold made for the server before is still on the data volume, and keeps nothing here:
    # the killer's reason is this boot's grace (a hold comes first in its rules, idle_decision.decide)
    on_disk = ssh(s["resources"]["floating_ip_address"], "cat /mnt/swarm_data/.gpu-rent-hold-until").stdout.split()
    assert on_disk[1] != server.id, on_disk
    reason = status(project)["idle_killer"]["status"]["reason"]
    assert reason.startswith("grace after boot"), reason


def test_the_llm_runtime_turned_on_pulls_its_model_and_the_tunnel_reaches_it(life, llm):
    project, _ = life
    first = llm.first_up
    assert first is not None and first.returncode == 0
    record = tunnel(project)
    assert record["llm_url"].startswith("http://127.0.0.1:") and record["llm_url"] in first.stdout
    # through the tunnel, on this machine's port: the model, with the manifest the registry gave
    models = http(f"{llm_url(project)}/api/tags")["models"]
    assert [(m["name"], "sha256:" + m["digest"]) for m in models] == [(llm.model, llm.digest)]
    assert http(f"{llm_url(project)}/api/version")["version"] == "0.32.15"
    # each blob came once, whole
    gets = llm.blob_gets()
    assert sum(g["bytes"] for g in gets) >= llm.size and all(g["status"] in (200, 206) for g in gets)
    address = state(project)["resources"]["floating_ip_address"]
    look = "systemctl is-active ollama; systemctl is-enabled ollama; findmnt -no TARGET --target /mnt/swarm_data/ollama"
    lines = ssh(address, f"{look}; ss -ltnH 'sport = :11434'").stdout.splitlines()
    assert lines[:3] == ["active", "enabled", "/mnt/swarm_data"], lines
    assert [line.split()[3] for line in lines[3:]] == ["127.0.0.1:11434"]  # never the network
    assert llm_url(project) in gpu_rent(project, "status").stdout


def test_an_llm_pull_cut_short_resumes_where_it_stopped(life, llm):
    """The model removed, then pulled by seed-llm slowly; the pull is cut midway (its client on the VM killed,
    as when the run that started it dies): that seed-llm fails naming the model, Ollama keeps what came
    (server/download.go writes the part's progress when its copy is canceled), and the next one asks the
    registry from there on. (A SIGKILLed Ollama itself keeps only finished parts of 100 MB or more, as upstream.)"""
    project, _ = life
    address = state(project)["resources"]["floating_ip_address"]
    http(f"{llm_url(project)}/api/delete", "DELETE", {"model": llm.model})
    assert http(f"{llm_url(project)}/api/tags")["models"] == []
    seen = len(llm.registry("/standin/stats")["requests"])
    llm.registry("/standin/throttle", {"bytes_per_second": 250_000})  # ~16 s for the model
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    seeding = subprocess.Popen([str(BIN / "gpu-rent"), "seed-llm"], cwd=project, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        partial = "find /mnt/swarm_data/ollama/blobs -name '*-partial' -size +1000k | head -1"
        wait_until("a partial blob past 1 MB", lambda: ssh(address, partial).stdout.strip(), 120, 1)
        killed = ssh(address, "pkill -KILL -f 'on_vm.llm_pull pull'")
        assert killed.returncode == 0, killed.stderr
        out, err = seeding.communicate(timeout=600)
    finally:
        seeding.kill()
        llm.registry("/standin/throttle", {"bytes_per_second": 0})
    assert seeding.returncode != 0 and llm.model in out + err, out[-3000:] + err[-3000:]
    again = gpu_rent(project, "seed-llm")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert [m["name"] for m in http(f"{llm_url(project)}/api/tags")["models"]] == [llm.model]
    after = llm.blob_gets(since=seen)
    resumed = [
        r for r in after if (r.get("range") or "").startswith("bytes=") and not r["range"].startswith("bytes=0-")
    ]
    assert resumed, after  # asked from where it stopped
    assert sum(r["bytes"] for r in after) < llm.size * 1.5, after  # not the whole model again


def test_status_shows_the_armed_idle_killer_whose_credential_may_delete_this_server_and_its_ip_only(life):
    project, ours = life
    server = ours.servers()[0]
    seen = status(project)
    assert seen["idle_killer"]["view"].startswith("armed, kept alive by: grace after boot"), seen["idle_killer"]
    assert seen["idle_killer"]["status"]["server_id"] == server.id
    rules = [(r["service"], r["method"], r["path"]) for r in ours.killer_credential().access_rules]
    fip = state(project)["resources"]["floating_ip"]
    assert sorted(rules) == [("compute", "DELETE", f"/v2.1/servers/{server.id}"),
                             ("compute", "GET", f"/v2.1/servers/{server.id}"),
                             ("network", "DELETE", f"/v2.0/floatingips/{fip}")]  # fmt: skip
    shown = gpu_rent(project, "status")
    assert "killer    armed, kept alive by: grace after boot" in shown.stdout
    address = state(project)["resources"]["floating_ip_address"]
    held = json.loads(ssh(address, "cat /root/.gpu-rent/idle-killer.json").stdout)
    # handed by up to the server once ACTIVE (its metadata), taken by the VM's killer: the one there is
    assert held["credential_id"] == ours.killer_credential().id
    secret = held["credential_secret"]
    files = [p for p in (project / ".gpu-rent").rglob("*") if p.is_file()]
    assert len(secret) > 20 and [str(p) for p in files if secret.encode() in p.read_bytes()] == []


def test_a_refused_credential_is_shown_loudly(life):
    project, ours = life
    address = state(project)["resources"]["floating_ip_address"]
    old = ours.killer_credential()
    ours.conn.identity.delete_application_credential(ours.conn.current_user_id, old.id)  # as an expiry would
    check = "PYTHONPATH=/usr/local/lib/gpu-rent python3 -m on_vm.idle_killer check"
    assert ssh(address, check).returncode == 1  # the killer's own periodic check, run now
    view = status(project)["idle_killer"]["view"]
    assert view.startswith("CREDENTIAL REFUSED, the VM cannot delete itself: Keystone refused"), view
    shown = gpu_rent(project, "status").stdout
    assert "killer    CREDENTIAL REFUSED" in shown and status(project)["idle_killer"]["unguarded"] is True
    assert "nothing on the VM is known to delete it: it bills until gpu-rent stop (the disks stay)" in shown, shown


def test_a_killer_refused_at_its_deadline_has_its_vm_deleted_by_the_watchdog_and_status_says_so(life):
    """The tunnel's watchdog reads the killer's report: its own verdict is "delete", and Keystone refuses its
    credential (deleted here, as an expiry or a revocation would). The laptop deletes the server with the
    user's credential, volumes kept, and says who and why; then up brings the VM back for the tests after."""
    project, ours = life
    server = ours.servers()[0]
    volumes = {v.name: v.id for v in ours.volumes().values()}
    pid = tunnel(project)["pid"]
    # the LLM runtime's model may still be loaded from the tests before: not looked at here
    quick = {"idle_killer_grace_seconds": 0, "idle_killer_idle_seconds": 20, "idle_killer_tick_seconds": 2,
             "idle_killer_llm": "false"}  # fmt: skip
    rearmed = playbook(project, "idle_killer.yml", *[f"-e{k}={v}" for k, v in quick.items()])
    assert rearmed.returncode == 0, rearmed.stdout[-3000:]
    ours.conn.identity.delete_application_credential(ours.conn.current_user_id, ours.killer_credential().id)
    wait_until("the watchdog to delete the server", lambda: not ours.servers(), 180)
    log = (project / ".gpu-rent" / "logs" / "tunnel.log").read_text()
    said = re.search(r"watchdog: the idle-killer decided the VM goes \(.*\) but cannot delete it: CREDENTIAL REFUSED, "
                     r"cannot delete this server: Keystone refused the credential \(HTTP 40[14][^)]*\); "
                     r"deleting the server with your credential \(the volumes stay\)", log)  # fmt: skip
    assert said, log[-3000:]
    record = project / ".gpu-rent" / "tunnel.json"
    wait_until("the tunnel to close", lambda: json.loads(record.read_text())["state"] == "closed", 60)
    closed = json.loads(record.read_text())["message"]
    assert closed.startswith("the server was deleted by gpu-rent watchdog at "), closed
    assert "but cannot delete it: CREDENTIAL REFUSED" in closed
    wait_until("the tunnel process to end", lambda: gone(pid), 30)
    assert ours.floating_ips() == []
    assert {v.name: v.id for v in ours.volumes().values()} == volumes
    end = status(project)["last_end"]
    assert end["server_id"] == server.id and end["line"].startswith("deleted by gpu-rent watchdog at"), end
    again = up(project)  # the VM back, armed as the project says, for the tests after this one
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert status(project)["idle_killer"]["view"].startswith("armed, kept alive by: grace after boot")


def test_the_watchdog_brings_back_a_shelved_server_with_the_same_disks_and_reopens_the_tunnel(life):
    project, ours = life
    server = ours.servers()[0]
    pid = tunnel(project)["pid"]
    volumes = {v.name: v.id for v in ours.volumes().values()}
    ours.conn.compute.shelve_server(server)  # what a preemption or a "freeze" leaves
    log = project / ".gpu-rent" / "logs" / "tunnel.log"
    wait_until("the watchdog to bring the VM back", lambda: "the VM is back" in log.read_text(), 300, 1)
    wait_until("the tunnel to forward again", lambda: tunnel(project)["state"] == "forwarding", 60)
    assert "status SHELVED" in log.read_text()  # the raw state, logged
    assert through_tunnel(project)["session_id"]
    assert tunnel(project)["pid"] == pid
    assert [s.id for s in ours.servers()] == [server.id]  # the same server, never a new rental
    assert ours.conn.compute.get_server(server.id).status == "ACTIVE"
    assert {v.name: v.id for v in ours.volumes().values()} == volumes
    assert state(project)["phase"] == "ready_tunneled"
    assert ours.killer_credential() is not None  # a credential Keystone takes
    assert status(project)["idle_killer"]["view"].startswith("armed, kept alive by: grace after boot")


def test_a_server_in_error_is_deleted_by_the_watchdog_with_the_volumes_kept_and_nothing_is_rented(life, admin_conn):
    """Nothing on a failed server can delete it and a cloud may bill it (money review #14): the watchdog deletes
    it as stop does, keeps the volumes, says why, and rents nothing; status names the end."""
    project, ours = life
    server = ours.servers()[0]
    pid = tunnel(project)["pid"]
    volumes = {v.name: v.id for v in ours.volumes().values()}
    admin_conn.compute.reset_server_state(server, "error")
    wait_until("the tunnel process to end", lambda: gone(pid), 90)
    record = json.loads((project / ".gpu-rent" / "tunnel.json").read_text())
    assert record["state"] == "closed" and record["exit_code"] == 1
    assert "the server is in ERROR" in record["message"] and "deleting it (the volumes stay)" in record["message"]
    assert ours.servers() == [] and ours.floating_ips() == []  # nothing bills but the disks
    assert {v.name: v.id for v in ours.volumes().values()} == volumes
    seen = status(project)
    assert seen["phase"] == "idle" and seen["last_end"]["by"] == "gpu-rent watchdog", seen["last_end"]
    assert "ERROR" in seen["last_end"]["reason"]
    # the rental as the next test expects it: running on the same disks, no tunnel
    back = gpu_rent(project, "up", "--yes", "--no-tunnel")
    assert back.returncode == 0, back.stderr[-3000:]
    assert {v.name: v.id for v in ours.volumes().values()} == volumes and len(ours.servers()) == 1


def test_ctrl_c_closes_a_foreground_tunnel_and_the_vm_keeps_running(life):
    project, ours = life
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    foreground = subprocess.Popen(
        [str(BIN / "gpu-rent"), "tunnel", "--watch-seconds", "2"], cwd=project, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        record = project / ".gpu-rent" / "tunnel.json"  # the ended tunnel's record until this one writes its own
        wait_until(
            "the tunnel to forward",
            lambda: json.loads(record.read_text()) == {**json.loads(record.read_text()), "pid": foreground.pid,
                                                        "state": "forwarding"},
            60,
        )  # fmt: skip
        assert through_tunnel(project)["session_id"] and state(project)["phase"] == "ready_tunneled"
        foreground.send_signal(signal.SIGINT)
        _, stderr = foreground.communicate(timeout=30)
    finally:
        if foreground.poll() is None:
            foreground.kill()
    assert foreground.returncode == 0, stderr
    assert "closed by the user; the VM keeps running" in stderr
    assert ours.servers()[0].status == "ACTIVE" and state(project)["phase"] == "ready_cloud"


def test_preempted_with_the_laptop_closed_status_names_what_bills_and_up_brings_it_back(life, llm):
    project, ours = life
    server = ours.servers()[0]
    address = state(project)["resources"]["floating_ip_address"]
    assert status(project)["tunnel"] is None  # no watchdog on the laptop: nothing brings it back
    with open(project / "gpu-rent.vars", "a") as f:
        f.write("PRICE_FLOATING_IP_PER_HOUR=0.25\nPRICE_DISK_GB_PER_HOUR=0.01\n")
    assert ssh(address, "touch /root/before-preemption").returncode == 0
    ours.conn.compute.shelve_server(server)  # what a preemption leaves on the ground (Selectel: EXPIRED)
    wait_until("the server shelved", lambda: ours.servers()[0].status == "SHELVED_OFFLOADED", 120)
    wait_until(f"{address} to stop answering", lambda: ssh(address, "true").returncode == 255, 60)
    gb = sum(v.size for v in ours.volumes().values())
    seen = status(project)
    bill = seen["stopped_bill"]
    assert bill.startswith("preempted (stopped by the cloud) at "), bill
    assert f"floating IP {address}, disks {gb} GB, ~{0.25 + gb * 0.01:.2f}/hour" in bill, bill
    shown = gpu_rent(project, "status").stdout
    assert "billing   preempted" in shown and "`gpu-rent stop` ends all but the disks" in shown
    pulled = llm.blob_gets()
    back = up(project)
    assert back.returncode == 0, back.stderr[-3000:]
    # a second up with the LLM runtime on pulls nothing: the model is on the data volume
    assert llm.blob_gets() == pulled
    assert [m["name"] for m in http(f"{llm_url(project)}/api/tags")["models"]] == [llm.model]
    assert f"server {server.name}: preempted (stopped by the cloud)" in back.stdout + back.stderr
    assert [(s.id, s.status) for s in ours.servers()] == [(server.id, "ACTIVE")]  # the same server, back
    assert ssh(address, "test -f /root/before-preemption").returncode == 0  # on its own boot volume
    assert status(project)["stopped_bill"] is None


def test_the_idle_killer_deletes_the_idle_vm_keeps_the_volumes_and_status_names_it(life, llm):
    project, ours = life
    server = ours.servers()[0]
    address = state(project)["resources"]["floating_ip_address"]
    address_id = state(project)["resources"]["floating_ip"]
    volumes = {v.name: v.id for v in ours.volumes().values()}
    seconds = {"idle_killer_grace_seconds": 0, "idle_killer_idle_seconds": 20, "idle_killer_tick_seconds": 2}
    rearmed = playbook(project, "idle_killer.yml", *[f"-e{k}={v}" for k, v in seconds.items()])
    assert rearmed.returncode == 0, rearmed.stdout[-3000:]

    # A chat front-end's keep_alive -1 keeps the model loaded for ever; Ollama moves its end at each request's
    # end all the same (server/sched.go processCompleted): each request that ended is work, named with its
    # model, and the VM goes IDLE_MINUTES after the last one, not after the trouble cap (audit U1).
    def ask() -> float:
        body = {"model": llm.model, "prompt": "hi", "stream": False, "keep_alive": -1}
        assert http(f"{llm_url(project)}/api/generate", "POST", body)["done"] is True
        return time.time()

    def report() -> dict:
        read = ssh(address, "cat /run/gpu-rent/idle-killer.json")
        return json.loads(read.stdout) if read.returncode == 0 else {}

    def tick_after(moment: float, starts: str) -> dict:
        return wait_until(f"a tick saying {starts!r}",
                          lambda: (r := report()).get("tick_at", 0) > moment and r["reason"].startswith(starts) and r,
                          60, 1)  # fmt: skip

    # A load holds /api/ps until the model is up (server/sched.go load keeps the runner's lock; the stand-in's
    # load takes STANDIN_OLLAMA_LOAD_SECONDS): the killer keeps the VM and names a load, not an Ollama fault.
    dropin = "/etc/systemd/system/ollama.service.d/standin-load.conf"
    unit = "[Service]\\nEnvironment=STANDIN_OLLAMA_LOAD_SECONDS=12\\n"
    slow = ssh(address, f"mkdir -p {dropin.rsplit('/', 1)[0]} && printf '{unit}' > {dropin} && "
                        "systemctl daemon-reload && systemctl restart ollama && for i in $(seq 100); do "
                        "curl -sf -o /dev/null 127.0.0.1:11434/api/version && break; sleep 0.1; done")  # fmt: skip
    assert slow.returncode == 0, slow.stderr
    loading = threading.Thread(target=ask)
    loading.start()
    try:
        load = tick_after(time.time(), "LLM runtime: Ollama loading a model (GET /api/ps waits for a model load)")
        assert load["action"] == "keep" and "counted as busy" in load["reason"], load
    finally:
        loading.join()
        ssh(address, f"rm -f {dropin} && systemctl daemon-reload")  # the next start loads at once again
    used = f"LLM runtime: model {llm.model} used (kept loaded for ever, "

    def said_since(moment: float) -> str:  # the killer's journal lines: a reason a tick held for 2 s may be missed
        return ssh(address, f"journalctl -u gpu-rent-idle-killer -o cat --since @{int(moment) - 1}").stdout

    quiet = tick_after(time.time(), "queue empty")  # begun after the load's request ended: the clock runs from it
    assert f"Ollama model {llm.model} kept loaded for ever, last request ended" in quiet["reason"], quiet
    assert used in said_since(load["tick_at"])  # the look that saw that request end counted it as work
    assert [m["name"] for m in http(f"{llm_url(project)}/api/ps")["models"]] == [llm.model]
    seen_end = quiet["memory"]["llm_seen"][llm.model]
    last = ask()
    moved = wait_until("the killer to see the second request's end",
                       lambda: (r := report()).get("memory", {}).get("llm_seen", {}).get(llm.model, 0) > seen_end + 1
                       and r, 60, 1)  # fmt: skip
    assert used in said_since(last)
    assert ours.servers()[0].status == "ACTIVE"
    said = wait_until("the killer's deadline after the last request",
                      lambda: (s := status(project)["idle_killer"]["status"]).get("fires_at")
                      and s["tick_at"] > moved["tick_at"] and s, 60, 1)  # fmt: skip
    # the user looks once, then closes the laptop
    assert said["server_id"] == server.id and said["fires_at"] > last + 19 > quiet["fires_at"], (said, quiet)
    wait_until("the VM deleted by its idle-killer", lambda: not ours.servers(), 90)
    # the tunnel up opened read the killer's report as it forwarded: it closes saying who deleted the VM
    record = project / ".gpu-rent" / "tunnel.json"
    wait_until("the watchdog to close the tunnel", lambda: json.loads(record.read_text())["state"] == "closed", 30)
    closed = json.loads(record.read_text())["message"]
    assert closed.startswith("the server was deleted by the idle-killer at "), closed
    after = ours.volumes()
    assert {v.name: v.id for v in after.values()} == volumes
    wait_until("both volumes free", lambda: all(v.status == "available" for v in ours.volumes().values()), 60)
    seen = status(project)
    assert seen["phase"] == "idle" and seen["server"] is None and seen["idle_killer"] is None
    # nothing bills but the disks: the killer deleted the floating IP after its server (issue 14)
    assert ours.floating_ips() == []
    named = {x["id"]: x["kind"] for x in seen["leftovers"]}
    assert server.id not in named and address_id not in named
    assert named.keys().isdisjoint(volumes.values())  # kept volumes are the project's, not leftovers
    # status names what killed it, from Nova's delete time and the deadline the killer had named
    end = seen["last_end"]
    assert end["server_id"] == server.id and end["by"] == "idle-killer", end
    assert said["fires_at"] - 120 <= end["at"] <= time.time(), end
    assert "ended     deleted by the idle-killer at" in gpu_rent(project, "status").stdout
    # the next up reads the killer's own last words from the boot volume it wrote them on
    again = up(project)
    assert again.returncode == 0, again.stderr[-3000:]
    told = again.stdout + again.stderr
    assert "the VM before this one was deleted by the idle-killer at" in told, told[-3000:]
    assert "deleting this server)" in told, told[-3000:]
    assert ours.killer_credential() is not None and status(project)["last_end"] is None  # a server again


def test_llamacpp_replaces_ollama_serves_its_gguf_through_the_tunnel_and_its_loaded_model_keeps_the_vm(life, llm):
    """LLM_RUNTIME switched to llamacpp on the running VM (the idle-killer's last up brought it back): up installs
    llama-server from the release mirror, downloads the GGUF file once onto the data volume, stops Ollama (the
    same port) and serves the file on 127.0.0.1 through the same tunnel port; a request at work keeps the VM."""
    project, ours = life
    address = state(project)["resources"]["floating_ip_address"]
    settings = (project / "gpu-rent.vars").read_text()
    settings = re.sub(r"^LLM_RUNTIME=.*$", "LLM_RUNTIME=llamacpp", settings, flags=re.M)
    settings = re.sub(r"^LLM_RELEASE_URL=.*$", f"LLM_RELEASE_URL={llm.llamacpp_release_url}", settings, flags=re.M)
    (project / "gpu-rent.vars").write_text(settings)
    with open(project / "ollama-models.yaml", "a") as f:
        f.write(f"llamacpp:\n  - url: {llm.gguf_url}\n    sha256: {llm.gguf_sha256}\n    serve: true\n")
    switched = up(project)
    assert switched.returncode == 0, switched.stdout[-3000:] + switched.stderr[-3000:]
    assert llm_url(project) in switched.stdout
    gguf = "/mnt/swarm_data/Models/LLM/tiny-q4.gguf"
    look = ("systemctl is-active llama-server; systemctl is-enabled llama-server; systemctl is-active ollama; "
            f"systemctl is-enabled ollama; sha256sum {gguf} | cut -d' ' -f1; ss -ltnH 'sport = :11434'")  # fmt: skip
    lines = ssh(address, look).stdout.splitlines()
    assert lines[:5] == ["active", "enabled", "inactive", "disabled", llm.gguf_sha256], lines
    assert [line.split()[3] for line in lines[5:]] == ["127.0.0.1:11434"]  # never the network
    # through the tunnel, on the same laptop port Ollama had
    assert http(f"{llm_url(project)}/health") == {"status": "ok"}
    assert [m["id"] for m in http(f"{llm_url(project)}/v1/models")["data"]] == ["tiny-q4"]
    # the file came once: seed-llm again finds it in place and downloads nothing
    assert llm.gets(llm.gguf_url) == 1
    again = gpu_rent(project, "seed-llm")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "llama.cpp and 1 model in place" in again.stdout and llm.gets(llm.gguf_url) == 1
    # llama-server awake (its model loaded) keeps the VM; asleep it is quiet. The killer reads /props, which
    # neither wakes it nor restarts its countdown to sleep; here it sleeps 4 s after a request, the killer ticks
    # every 2 s (seed_llm.yml re-arms the killer and reconfigures llama-server in one run)
    quick = {"idle_killer_grace_seconds": 0, "idle_killer_idle_seconds": 600, "idle_killer_tick_seconds": 2,
             "llm_runtime_llamacpp_sleep_seconds": 4}  # fmt: skip
    # its model loads in 12 s (the stand-in's STANDIN_LLAMA_LOAD_SECONDS; a 4 GB model takes 11-17 s on the real
    # server), longer than the killer's 5 s look: the restart below takes it up
    dropin = "/etc/systemd/system/llama-server.service.d/standin-load.conf"
    unit = "[Service]\\nEnvironment=STANDIN_LLAMA_LOAD_SECONDS=12\\n"
    slow = ssh(address, f"mkdir -p {dropin.rsplit('/', 1)[0]} && printf '{unit}' > {dropin} && systemctl daemon-reload")
    assert slow.returncode == 0, slow.stderr
    rearmed = playbook(project, "seed_llm.yml", *[f"-e{k}={v}" for k, v in quick.items()])
    assert rearmed.returncode == 0, rearmed.stdout[-3000:]
    assert llm.gets(llm.llamacpp_release_url) == 1  # a new setting restarts the build in place, not a new install

    def report() -> dict:
        read = ssh(address, "cat /run/gpu-rent/idle-killer.json")
        return json.loads(read.stdout) if read.returncode == 0 else {}

    def tick_after(moment: float) -> dict:
        return wait_until("the killer's tick", lambda: (r := report()).get("tick_at", 0) > moment and r, 60, 1)

    asleep = wait_until("llama-server asleep", lambda: "llama.cpp model asleep" in tick_after(time.time())["reason"])
    assert asleep and ours.servers()[0].status == "ACTIVE"
    body = json.dumps({"prompt": "hi", "n_predict": 200})  # 10 s at the stand-in's 20 tokens/s
    started = time.time()
    answering = subprocess.Popen(  # a request of its own, running while the killer looks
        [sys.executable, "-c", "import sys, urllib.request; urllib.request.urlopen(urllib.request.Request("
         "sys.argv[1], sys.argv[2].encode(), {'Content-Type': 'application/json'}), timeout=120).read()",
         f"{llm_url(project)}/completion", body], stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        # the request woke it: the model reloads holding the queue's lock, so /props does not answer (only /health
        # does) and the killer names the reload, keeping the VM, where it read a sleeping model before (issue 38)
        reloading = wait_until("the reload named", lambda: (r := tick_after(started + 1))["reason"].startswith(
            "LLM runtime: llama.cpp loading a model (GET /props waits for the model's reload)") and r, 60)  # fmt: skip
        assert reloading["action"] == "keep" and "counted as busy" in reloading["reason"], reloading
        told = wait_until("the model up", lambda: (r := tick_after(time.time()))["reason"].startswith(
            "LLM runtime: llama.cpp model loaded") and r, 60)  # fmt: skip
        assert answering.poll() is None  # the request still ran when the killer looked
    finally:
        assert answering.wait(timeout=120) == 0
        ssh(address, f"rm -f {dropin} && systemctl daemon-reload")
    assert ours.servers()[0].status == "ACTIVE" and told["action"] == "keep"
    # done, it sleeps 4 s later and gives its VRAM back: the killer is quiet again
    wait_until("asleep again", lambda: "llama.cpp model asleep" in tick_after(time.time())["reason"], 60, 1)


def test_a_direct_ansible_playbook_stop_needs_no_flags_and_status_reconciles(life):
    project, ours = life
    server = ours.servers()[0]
    result = playbook(project, "stop.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    assert ours.servers() == [] and ours.floating_ips() == [] and ours.killer_credential() is None
    seen = status(project)
    assert seen["phase"] == "idle" and seen["server"] is None
    assert "server" not in state(project)["resources"]
    assert len(ours.volumes()) == 2
    # gpu-rent did not see who: it says when, and that it was not its stop or the killer it watched
    end = seen["last_end"]
    assert end["server_id"] == server.id and end["by"] == "elsewhere" and end["at"], end
    assert end["line"].startswith("deleted at ") and "not by gpu-rent stop" in end["line"]
    nothing_to_hold = gpu_rent(project, "hold")
    assert nothing_to_hold.returncode == 2 and "no running VM to hold" in nothing_to_hold.stderr


def test_status_names_orphans_with_commands_that_delete_them(life, cloud, net):
    """An unmarked gpu-rent server of another name is that NAME's (gpu-rent names its server after NAME): named,
    never given a delete command. Marked with this project's NAME, it is this project's second server: deleted."""
    project, ours = life
    orphan = cloud.server(net, cloud.volume(10, image=True), tags=["gpu-rent"], name="forgotten")
    unmarked = {x["id"]: x for x in status(project)["leftovers"]}[orphan.id]
    assert unmarked["delete_command"] is None, unmarked
    assert unmarked["end"] == "`gpu-rent stop` in the project folder of NAME=forgotten"
    ours.conn.compute.set_server_metadata(orphan, **{"gpu-rent": ours.name})
    stray_ip = ours.conn.network.create_ip(floating_network_id=ours.conn.network.find_network("external").id)
    cloud.later(lambda: ours.conn.network.delete_ip(stray_ip, ignore_missing=True))
    leftovers = {x["id"]: x for x in status(project)["leftovers"]}
    assert set(leftovers) >= {orphan.id, stray_ip.id}
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for item in (leftovers[orphan.id], leftovers[stray_ip.id]):
        assert str(CLOUDS_YAML) in item["delete_command"]
        done = subprocess.run(item["delete_command"], shell=True, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    ours.conn.compute.wait_for_delete(orphan, wait=120)
    assert {x["id"] for x in status(project)["leftovers"]}.isdisjoint({orphan.id, stray_ip.id})


def test_status_names_another_projects_server_and_a_volume_with_no_command_that_deletes_them(life, cloud, net):
    """Two project folders in one cloud project (or a volume left by a rename): status names each, and gives
    no command that would end another folder's work unsaved or delete someone's data (money-review P9)."""
    project, ours = life
    theirs = cloud.server(net, cloud.volume(10, image=True), tags=["gpu-rent"], name="other-vm",
                          metadata={"gpu-rent": "other-project"})  # fmt: skip
    data = cloud.volume(1, name="other-project-data")
    ours.conn.block_storage.set_volume_metadata(data, **{"gpu-rent": "data"})
    leftovers = {x["id"]: x for x in status(project)["leftovers"]}
    assert leftovers[theirs.id]["delete_command"] is None
    assert leftovers[theirs.id]["end"] == "`gpu-rent stop` in the project folder of NAME=other-project"
    assert leftovers[data.id]["delete_command"] is None and "holds data" in leftovers[data.id]["end"]
    shown = gpu_rent(project, "status")
    assert shown.returncode == 0, shown.stderr
    assert "volume delete" not in shown.stdout and f"server delete {theirs.id}" not in shown.stdout
    assert "ends with" in shown.stdout and "NAME=other-project" in shown.stdout


def test_a_login_to_another_project_is_refused_and_the_states_ids_are_kept(life, admin_conn, tmp_path):
    """A shell that exports another project's OS_PROJECT_ID changes nothing: the folder's .env is its whole login.
    A .env that logs in to another project (a sourced openrc copied in) is refused in one line naming the login,
    before status could call the volumes gone and forget them (issue 38 item 6)."""
    import yaml

    project, _ = life
    identity = admin_conn.identity
    other = identity.create_project(name=f"gpu-rent-other-{uuid.uuid4().hex[:6]}", domain_id="default")
    env_file = project / ".env"
    saved = env_file.read_text()
    try:
        identity.assign_project_role_to_user(other, identity.find_user("gpu-rent-user"), identity.find_role("member"))
        before = state(project)
        assert before["resources"] and before["cloud"]["project_id"] != other.id
        exported = gpu_rent(
            project, "status", "--json", shell={"OS_PROJECT_ID": other.id, "OS_PROJECT_NAME": other.name}
        )
        assert exported.returncode == 0, exported.stderr
        assert state(project)["resources"] == before["resources"]
        clouds = yaml.safe_load(CLOUDS_YAML.read_text())
        ground = clouds["clouds"]["ground"]
        clouds["clouds"]["elsewhere"] = {**ground, "auth": {**ground["auth"], "project_name": other.name}}
        elsewhere = tmp_path / "clouds.yaml"
        elsewhere.write_text(yaml.safe_dump(clouds))
        login = re.sub(r"^OS_CLIENT_CONFIG_FILE=.*$", f"OS_CLIENT_CONFIG_FILE={elsewhere}", saved, flags=re.M)
        env_file.write_text(re.sub(r"^OS_CLOUD=.*$", "OS_CLOUD=elsewhere", login, flags=re.M))
        refused = gpu_rent(project, "status")
    finally:
        env_file.write_text(saved)
        identity.delete_project(other)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    # the line names where the login came from: the .env's OS_CLOUD, an entry of the clouds.yaml it names
    assert len(refused.stderr.strip().splitlines()) == 1 and 'entry "elsewhere"' in refused.stderr, refused.stderr
    assert f"logs in to project {other.id}" in refused.stderr and "refused, nothing forgotten" in refused.stderr
    assert state(project)["resources"] == before["resources"] and state(project)["cloud"] == before["cloud"]
    assert gpu_rent(project, "status").returncode == 0  # its own login again: the folder as it was


def test_a_corrupt_state_file_is_moved_aside_and_rebuilt_from_the_cloud(life):
    project, ours = life
    (project / ".gpu-rent" / "state.json").write_text("{ not json")
    result = gpu_rent(project, "status", "--json")
    assert result.returncode == 0, result.stderr
    assert "moved to state.json.corrupt-" in result.stderr
    (moved,) = (project / ".gpu-rent").glob("state.json.corrupt-*")
    assert moved.read_text() == "{ not json"
    assert json.loads(result.stdout)["phase"] == "idle"
    # the kept volumes are this project's, as the cloud proves: the rebuilt state holds them again
    volumes = {name: volume.id for name, volume in ours.volumes().items()}
    rebuilt = json.loads((project / ".gpu-rent" / "state.json").read_text())["resources"]
    assert rebuilt == {"boot_volume": volumes[f"{ours.name}-boot"], "data_volume": volumes[f"{ours.name}-data"]}


def test_destroy_refuses_without_the_flag_and_removes_everything_with_it(life):
    project, ours = life
    # stopped: the server went with stop (the same teardown as here); volumes, snapshot, network stay
    refused = gpu_rent(project, "destroy")
    assert refused.returncode == 2 and "--i-understand-data-loss" in refused.stderr
    assert len(ours.volumes()) == 2 and ours.everything()["snapshots"] and ours.everything()["networks"]
    result = gpu_rent(project, "destroy", "--i-understand-data-loss")
    assert result.returncode == 0, result.stderr
    assert ours.everything() == NOTHING
    assert state(project)["resources"] == {} and state(project)["phase"] == "idle"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("FLAVOR_FALLBACK=gpu.l4.1,gpu.nope", "FLAVOR_FALLBACK: flavor gpu.nope does not exist"),
        ("IMAGE=No Such Image", "IMAGE=No Such Image: no such image"),
        ("POOL=ru-9z", "POOL=ru-9z: no such pool"),
    ],
)
def test_names_the_cloud_lacks_are_refused_before_anything_is_created(tmp_path, member_conn, line, message):
    project = make_project(tmp_path, f"t{uuid.uuid4().hex[:6]}")
    key = line.split("=")[0]
    text = "".join(
        f"{line}\n" if existing.startswith(f"{key}=") else existing
        for existing in (project / "gpu-rent.vars").read_text().splitlines(keepends=True)
    )
    (project / "gpu-rent.vars").write_text(text)
    result = gpu_rent(project, "up", "--yes")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert Ours(member_conn, project.name).everything() == NOTHING


def test_no_secret_reaches_the_logs_state_or_runner_artifacts(life):
    project, _ = life
    import yaml

    password = yaml.safe_load(CLOUDS_YAML.read_text())["clouds"]["ground"]["auth"]["password"]
    files = [p for p in (project / ".gpu-rent").rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files) and any(p.name == "command" for p in files)
    leaking = [str(p) for p in files if password.encode() in p.read_bytes()]
    assert leaking == []
    assert not list((project / ".gpu-rent").rglob("auth*.json"))  # the handed-over auth is gone
