"""Faults at every step of up and stop, on the ground: the CLI killed outright (kill -9) at each phase
boundary and in the middle of each step, Ctrl+C, an unreachable VM, a cloud API that goes away and
comes back, the idle-killer ticking in the middle of the bootstrap and firing in the middle of a stop.

One project walks through all of them in order, each fault met by running the same command again.
After every fault: every server and floating IP of the project is one that `status` names, both
volumes are the ones the first up made (never re-created, never in error), and what was written to
the data volume is still there. At the end no secret is in any file gpu-rent wrote.

The up walk begins in the background with the session (see Walk); the stop faults follow it here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpu_rent.rental.orphans import PROJECT_MARK, marked
from tests.ground import molecule_runs
from tests.ground.test_rental import BIN, Ours, gpu_rent, make_project, state, status
from tests.groundkit import CLOUDS_YAML, REPO, connect, require_ground, ssh, wait_until

# The idle-killer would delete an idle VM after one minute, were it not for the grace after arming
# (long: the walk begins with the session and the stop test follows some modules later).
FAULT_VARS = "IDLE_MINUTES=1\nIDLE_GRACE_MINUTES=120\n"
SENTINEL = "/mnt/swarm_data/Output/fault-suite.txt"
# the killer as its unit runs it (roles/idle_killer/templates/gpu-rent-idle-killer.service.j2)
KILLER = "PYTHONPATH=/usr/local/lib/gpu-rent python3 -m on_vm.idle_killer"

Trigger = Callable[[Path, float], bool]


def task(playbook: str, name: str) -> Trigger:
    """True once a run of PLAYBOOK begun after `since` has started the task NAME."""

    def seen(project: Path, since: float) -> bool:
        for log in (project / ".gpu-rent" / "logs").glob(f"*-{playbook}.log"):
            if log.stat().st_mtime >= since - 1:
                lines = log.read_text(errors="replace").splitlines()
                if any(line.startswith("TASK [") and name in line for line in lines):
                    return True
        return False

    return seen


def phase(name: str) -> Trigger:
    def reached(project: Path, since: float) -> bool:
        try:
            return state(project)["phase"] == name
        except (OSError, ValueError, KeyError):
            return False

    return reached


def ansible_temp_files_holding(needles: list[bytes], since: float) -> list[str]:
    """Files written since `since` under ~/.ansible/tmp and the temp folder's ansible_* that hold a needle."""
    roots = [Path.home() / ".ansible" / "tmp", *Path(tempfile.gettempdir()).glob("ansible_*")]
    found = []
    for root in roots:
        # os.walk passes over folders that other runs remove meanwhile (Molecule, direct playbook runs)
        files = [Path(folder, name) for folder, _, names in os.walk(root) for name in names] or [root]
        for path in files:
            try:
                if path.is_file() and path.stat().st_mtime >= since:
                    data = path.read_bytes()
                    found += [f"{path}: {n.decode()}" for n in needles if n in data]
            except OSError:
                continue  # another test's run took it away meanwhile
    return found


def playbook_processes(project: Path) -> list[int]:
    return marked(PROJECT_MARK, str(project))


class Rental:
    """The project under faults, and what must hold after each."""

    def __init__(self, project: Path, ours: Ours):
        self.project, self.ours = project, ours
        self.volumes: dict[str, str] = {}  # name -> id, once the first up made both
        self.faults: list[str] = []
        self.started = time.time()

    def env(self) -> dict:
        return {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}

    def start(self, *args: str) -> tuple[subprocess.Popen, Path]:
        out = self.project.parent / f"run-{len(self.faults)}-{args[0]}.out"
        with open(out, "w") as f:
            proc = subprocess.Popen(
                [str(BIN / "gpu-rent"), *args], cwd=self.project, env=self.env(), stdout=f, stderr=subprocess.STDOUT
            )
        return proc, out

    def interrupt(self, args: tuple[str, ...], when: Trigger, what: str, after: float = 0.0, sig=signal.SIGKILL):
        """Run gpu-rent ARGS and send SIG (kill -9 by default) the moment WHEN holds (plus AFTER seconds)."""
        since = time.time()
        proc, out = self.start(*args)
        deadline = time.monotonic() + 600
        while not when(self.project, since):
            if proc.poll() is not None:
                ended = f"{' '.join(args)} ended (exit {proc.returncode})"
                raise AssertionError(f"{ended} before {what}:\n{out.read_text()}")
            assert time.monotonic() < deadline, f"{what} never came:\n{out.read_text()}"
            time.sleep(0.05)
        time.sleep(after)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        # the playbook does not rent on without its command (the run's watcher ends it)
        wait_until(f"the playbook to end with {' '.join(args)}", lambda: not playbook_processes(self.project), 30)
        self.faults.append(f"{'kill -9' if sig == signal.SIGKILL else 'Ctrl+C'} {' '.join(args)}: {what}")
        return proc, out

    def converged_invariants(self, label: str) -> dict:
        """Every server and floating IP of the project named by status; the same two volumes, none in error."""
        seen = status(self.project)
        named = {x["id"] for x in seen["leftovers"]} | {str(v) for v in seen["resources"].values()}
        if seen["server"]:
            named.add(seen["server"]["id"])
        servers = self.ours.servers()
        assert len(servers) <= 1, (label, [(s.id, s.status) for s in servers])
        for s in servers:
            assert s.id in named, (label, "server not named by status", s.id, seen)
        for ip in self.ours.floating_ips():
            assert ip.id in named or ip.floating_ip_address == seen["floating_ip"], (label, "floating IP", ip.id, seen)
        volumes = self.ours.volumes()
        assert all(v.status != "error" for v in volumes.values()), (label, {n: v.status for n, v in volumes.items()})
        if self.volumes:
            assert {n: v.id for n, v in volumes.items()} == self.volumes, (label, "the volumes changed")
        elif len(volumes) == 2:
            self.volumes = {n: v.id for n, v in volumes.items()}
        return seen

    def address(self) -> str:
        return state(self.project)["resources"]["floating_ip_address"]

    def on_vm(self, command: str) -> str:
        result = ssh(self.address(), command)
        assert result.returncode == 0, (command, result.stderr)
        return result.stdout

    def up_converges(self) -> dict:
        result = gpu_rent(self.project, "up", "--yes", "--watch-seconds", "2")
        assert result.returncode == 0, f"after {self.faults[-1:]}: {result.stderr}"
        assert state(self.project)["phase"] == "ready_tunneled"
        return self.converged_invariants("up converged")


class Walk:
    """The up walk, started in the background with the session (conftest.py) and judged here.

    It is a dozen ups, run beside the first ground modules (using the CPU the suite alone leaves
    idle) instead of after them; nothing in it touches another project (its one iptables rule names
    its own VM). The stop test goes on from where it ended, in the foreground: it takes Neutron away."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.rental: Rental | None = None
        self.error: BaseException | None = None
        self.destroyed = False

    def start(self) -> None:
        if self.thread is not None:
            return
        name = f"f{uuid.uuid4().hex[:6]}"
        project = make_project(Path(tempfile.mkdtemp(prefix="gpu-rent-faults-")), name)
        with open(project / "gpu-rent.vars", "a") as f:
            f.write(FAULT_VARS)
        self.rental = Rental(project, Ours(connect("ground"), name))  # a connection of its own thread
        self.thread = threading.Thread(target=self._walk, name="fault-walk", daemon=True)
        self.thread.start()

    def _walk(self) -> None:
        try:
            walk_up_faults(self.rental)
        except BaseException as e:  # judged in the foreground, by result()
            self.error = e

    def result(self) -> Rental:
        self.start()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.rental

    def destroy(self) -> dict:
        """Once: the walk's playbooks killed, the project destroyed; what the cloud still holds of it."""
        if self.rental is None or self.destroyed:
            return {"servers": [], "volumes": []}
        self.thread.join()
        self.destroyed = True
        for pid in playbook_processes(self.rental.project):
            os.kill(pid, signal.SIGKILL)
        gpu_rent(self.rental.project, "destroy", "--i-understand-data-loss")
        return self.rental.ours.everything()


WALK = pytest.StashKey[Walk]()


@pytest.fixture(scope="module")
def walk(pytestconfig):
    require_ground()
    walk = pytestconfig.stash.setdefault(WALK, Walk())
    yield walk
    walk.destroy()  # also when the walk failed and the stop test never set up its rental


@pytest.fixture(scope="module")
def rental(walk):
    yield walk.result()
    left = walk.destroy()
    assert left["servers"] == [] and left["volumes"] == [], left


# Faults of `up`, in the order the run meets them: kill -9 of the CLI, unless said otherwise. Each is
# followed by `up` again, which meets the next fault: every resumed run must get past the work of the one before.
UP_FAULTS = [
    ("kill", "phase provisioning written, before the playbook's first task", phase("provisioning"), 0.0),
    ("kill", "creating the security group", task("up", "Create the security group with SSH from the operator"), 0.3),
    ("ctrl+c", "creating the boot volume from the image", task("up", "Create the boot volume, once,"), 0.5),
    ("kill", "renting the first flavor (No valid host)", task("up", "from the existing volumes as gpu.a100.1"), 1.0),
    ("kill", "renting the fallback flavor (building)", task("up", "from the existing volumes as gpu.l4.1"), 1.0),
    # the server's create attaches the address now; the role's own attach is included only where it did not
    ("kill", "attaching the floating IP", task("up", "floating_ip : Take this project's floating IP and attach"), 0.2),
    ("kill", "phase bootstrapping: SSH answers", phase("bootstrapping"), 0.0),
    ("kill", "making the idle-killer's credential", task("up", "idle_killer : Keep or make the credential"), 0.5),
    ("kill", "formatting the empty data volume", task("up", "data_volume : Format the empty disk, once."), 0.2),
    ("unreachable", "installing SwarmUI's backend", task("up", "swarmui : Run SwarmUI's ComfyUI installer"), 0.5),
    ("kill", "phase ready_cloud, before the tunnel opens", phase("ready_cloud"), 0.0),
]


# Eleven faults, each met by an up again: one walk, longer than one test's 600 s (it may have begun
# with the session, or begin here when this file runs alone).
@pytest.mark.timeout(2400)
def test_up_converges_after_a_fault_at_every_step(walk):
    walk.result()


def walk_up_faults(rental: Rental) -> None:
    server_in_bootstrap = None
    for how, what, when, after in UP_FAULTS:
        if how == "ctrl+c":  # the playbook's process group stops, the phase stays
            proc, out = rental.interrupt(("up", "--yes"), when, what, after, sig=signal.SIGINT)
            assert proc.returncode == 130 and "canceled" in out.read_text(), out.read_text()
            assert "no idle-killer is armed" not in out.read_text()  # canceled before any server was created
        elif how == "unreachable":
            unreachable(rental, when, what)
        else:
            rental.interrupt(("up", "--yes"), when, what, after)
        seen = rental.converged_invariants(what)
        if how == "kill" and not what.startswith("phase"):  # killed mid-playbook: status tells the up left half done
            assert (seen.get("operation") or {}).get("command") == "up", (what, seen.get("operation"))

        if what == "phase bootstrapping: SSH answers":
            server_in_bootstrap = state(rental.project)["resources"]["server"]
        if what == "installing SwarmUI's backend":
            # the data volume is bound by now: write to it, and look at what the idle-killer decides mid-bootstrap
            rental.on_vm(f"echo survives-every-fault > {SENTINEL}")
            rental.on_vm("systemctl start gpu-rent-idle-killer.service")
            decision = json.loads(rental.on_vm("cat /run/gpu-rent/idle-killer.json"))
            assert decision["action"] == "keep" and "grace" in decision["reason"], decision

    # the last fault leaves an ACTIVE server; an earlier tool replaced its tag list (the API replaces it whole)
    [server] = rental.ours.servers()
    rental.ours.conn.compute.put(f"/servers/{server.id}/tags", json={"tags": ["gpu-rent"]}, microversion="2.26")
    rental.up_converges()
    # the preemptible tag is back (without it Selectel bills the full price) on the same server
    assert sorted(rental.ours.conn.compute.get_server(server.id).tags) == ["gpu-rent", "preemptible"]
    s = state(rental.project)
    assert s["resources"]["server"] == server_in_bootstrap  # the killer never fired through the bootstrap
    assert rental.on_vm(f"cat {SENTINEL}").strip() == "survives-every-fault"
    assert len(rental.faults) == len(UP_FAULTS)


def unreachable(rental: Rental, when: Trigger, what: str) -> None:
    """The VM stops answering SSH (connections reset) at WHEN: a clear failure; the next up resumes."""
    reject = ["-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset"]
    block = ["OUTPUT", "-d", rental.address(), *reject]
    since = time.time()
    proc, out = rental.start("up", "--yes")
    try:
        wait_until(what, lambda: when(rental.project, since), 300, 0.05)
        subprocess.run(["iptables", "-I", *block], check=True)
        assert proc.wait(timeout=300) == 1, out.read_text()
    finally:
        subprocess.run(["iptables", "-D", *block], check=False)
    said = out.read_text()
    assert "does not answer over SSH" in said and "Traceback" not in said, said
    assert "no idle-killer is armed" not in said, said  # it was armed before the VM stopped answering
    assert not playbook_processes(rental.project)
    rental.faults.append(f"up: the VM unreachable over SSH while {what}")


def fire_the_killer(address: str) -> None:
    """The VM's own idle-killer, its limits set to nothing, ticks until it has deleted its server."""
    loosen = (
        "import json; p='/root/.gpu-rent/idle-killer.json'; c=json.load(open(p)); "
        "c.update(grace_seconds=0, idle_seconds=0, cap_seconds=0); json.dump(c, open(p, 'w'))"
    )
    ssh(address, f'python3 -c "{loosen}" && for i in 1 2 3; do {KILLER} tick; sleep 1; done', timeout=60)


@pytest.mark.timeout(600 + molecule_runs.TIMEOUT * 3)  # it may wait for the Molecule scenarios first
def test_stop_converges_after_the_killer_fires_mid_stop_kills_and_an_api_outage(rental, molecule_quiet):
    """stop killed at its playbook's first step, after its head start asked Nova for the delete; up rents
    again; then the tunnel of --stop-on-exit killed outright: its sentinel stops the VM, and the idle-killer
    deletes the server while that stop's playbook looks it up (its head start asked for the delete too, so
    both delete at once); the sentinel is killed in turn, then `stop` in its next step, then Neutron's API
    goes away; the next stop ends it all."""
    project = rental.project
    secret = json.loads(rental.on_vm("cat /root/.gpu-rent/idle-killer.json"))["credential_secret"]
    pulled = gpu_rent(project, "pull-output")
    assert pulled.returncode == 0, pulled.stderr
    assert (project / "Output" / Path(SENTINEL).name).read_text().strip() == "survives-every-fault"
    # stop killed at its playbook's first step: its head start (gpu_rent/rental/stop_head_start.py) had asked Nova
    # for the delete, so the server goes; its address and the killer's credential wait for the next stop,
    # and the next up rents again on the same volumes
    rental.interrupt(("stop",), task("stop", "Refuse to destroy the volumes"), "stop's first step", 0.0)
    rental.converged_invariants("stop killed at its first step")
    wait_until("the server to go, asked for before the killed playbook", lambda: not rental.ours.servers(), 60)
    rental.converged_invariants("the server gone after the killed stop")
    again = gpu_rent(project, "up", "--yes", "--no-tunnel")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert rental.ours.servers()
    secrets = [secret, json.loads(rental.on_vm("cat /root/.gpu-rent/idle-killer.json"))["credential_secret"]]
    # an end status kept from the walk's servers (one in ERROR that up deleted, when status saw it first)
    kept_end = project / ".gpu-rent" / "last-end.json"
    earlier_end = json.loads(kept_end.read_text()) if kept_end.exists() else None
    opened = gpu_rent(project, "tunnel", "--background", "--stop-on-exit")
    assert opened.returncode == 0, opened.stderr
    address, server = rental.address(), state(project)["resources"]["server"]
    record = json.loads((project / ".gpu-rent/tunnel.json").read_text())
    since = time.time()
    os.kill(record["pid"], signal.SIGKILL)
    wait_until("the sentinel's stop to look at the server", lambda: task("stop", "Look up the server.")(project, since))
    frozen = playbook_processes(project)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        fire_the_killer(address)
        wait_until("the idle-killer's delete", lambda: not rental.ours.servers(), 60)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    wait_until(
        "the sentinel's stop to reach the floating IP",
        lambda: task("stop", "Delete this project's floating IP.")(project, since),
        120,
    )
    os.kill(record["sentinel_pid"], signal.SIGKILL)
    rental.faults.append("kill -9 the sentinel's stop, after the idle-killer deleted the server mid-stop")
    wait_until("the sentinel's playbook to end with it", lambda: not playbook_processes(project), 30)
    assert "ended uncleanly" in (project / ".gpu-rent/logs/sentinel.log").read_text()
    rental.converged_invariants("killer mid-stop, sentinel killed")

    rental.interrupt(("stop",), task("stop", "Look up the server."), "deleting the server and the credential", 0.2)
    rental.converged_invariants("stop killed deleting the credential")

    service = REPO / "ground" / "service.sh"
    molecule_quiet()  # Neutron goes for every project on the ground, not only this one
    subprocess.run([str(service), "stop", "neutron-api"], check=True, capture_output=True)
    try:
        failed = gpu_rent(project, "stop")
    finally:
        subprocess.run([str(service), "start", "neutron-api"], check=True, capture_output=True)
    assert failed.returncode in (1, 4), failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in failed.stderr + failed.stdout, failed.stderr
    rental.faults.append("stop: Neutron's API gone")
    rental.converged_invariants("API outage")

    result = gpu_rent(project, "stop")
    assert result.returncode == 0, result.stderr
    seen = rental.converged_invariants("stop converged")
    assert seen["phase"] == "idle" and seen["server"] is None and seen["leftovers"] == [], seen
    assert not rental.ours.servers() and not rental.ours.floating_ips() and rental.ours.killer_credential() is None
    # how the server ended, when some step saw it go (the killed stop's record, or status finding it gone);
    # else the end kept from before this test
    ended = seen.pop("last_end", None)
    # (status adds the sentence it shows to the record it read)
    kept = {k: v for k, v in (ended or {}).items() if k != "line"}
    assert ended is None or ended["server_id"] == server or kept == earlier_end, (ended, earlier_end)
    assert server not in json.dumps(seen)
    assert len(rental.faults) == len(UP_FAULTS) + 4, rental.faults
    kills = [f for f in rental.faults if f.startswith("kill -9")]
    assert len(kills) >= 12, kills

    # nothing gpu-rent wrote holds the cloud password or the killer's credential secret
    password = yaml.safe_load(CLOUDS_YAML.read_text())["clouds"]["ground"]["auth"]["password"]
    written = [p for p in project.rglob("*") if p.is_file() and p.name not in (".env", "id_ed25519")]
    written += list(project.parent.glob("run-*.out"))
    assert any(p.suffix == ".log" for p in written) and any(p.name == "command" for p in written)
    assert any(p.parts[-2] == "Output" for p in written)
    for secret_text in (password, *secrets):
        leaking = [str(p) for p in written if secret_text.encode() in p.read_bytes()]
        assert leaking == [], leaking
    # killed runs leave nothing in Ansible's default temp folders either: module arguments (the password)
    # travel on a pipe, and the killer's staged credential sits in the run's own temp, which went with it
    assert list((project / ".gpu-rent" / "runner" / "tmp").iterdir()) == []
    # (this project's name and its credential, not the password: other tests' live runs share that login)
    left = ansible_temp_files_holding([project.name.encode(), *(s.encode() for s in secrets)], since=rental.started)
    assert left == [], left
