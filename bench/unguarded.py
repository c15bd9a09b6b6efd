"""The unguarded window: from Nova taking a server's create to a killer on that server able to delete it.

Usage (the test ground running; from the repository root):
    .venv/bin/python bench/unguarded.py

Rents in a copy of the ground's project (its own NAME) twice with `gpu-rent up --yes --no-tunnel`: cold (the
first up makes the volumes; nothing is on the boot volume yet) and warm (after a stop; the killer of the first
life is on the kept boot volume). A thread watches Nova every 0.1 s meanwhile and marks when the server is first
listed (the create taken), first carries a killer's credential in its metadata (the create's, CREATE_NOTES in
plugins/module_utils/gpu_rent_killer_handoff.py), first ACTIVE, and first carries its own (another credential);
another reads the killer's report on the VM over SSH and marks the first tick that names this server with its
credential proven (idle_killer's own GET of its server).

Printed, in seconds and against the create call's own round trip (a POST /servers of the same kind, timed here
from the stopped project's volumes and deleted at once):
  carried   create -> a credential on the server: the unguarded window of a server whose boot volume holds a
            killer (warm), whatever becomes of the laptop after (goal <= 1: it rides in the create itself;
            the poll's 0.1 s is the resolution).
  own       ACTIVE -> the server's own credential in its metadata, in place of the create's (goal <= 2 round
            trips: the credential and the metadata are two calls). Nova refuses a building server's metadata.
  warm      create -> the kept killer proven for the new server (it took the carried credential, no SSH): the
            window plus the guest's boot; goal <= 5 round trips, the issue's 2 s at the ground's ~0.4 s.
  cold      create -> the killer proven; on a boot from IMAGE the arm over SSH or the killer cloud-init's user
            data installed (issue 37; its first tick comes a minute after cloud-init's last stage), the first.
Destroys the rental at the end, whatever happened.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._rental import destroyed
from bench._report import report
from gpu_rent.on_vm import paths
from tests.ground.test_rental import gpu_rent, make_project
from tests.groundkit import connect, ground_missing, ssh, unique


class Watch:
    """Marks (time.time()) of one server's life, read from Nova and from its killer's report."""

    def __init__(self, conn, name: str):
        self.conn, self.name = conn, name
        self.marks: dict[str, float] = {}
        self.server_ids: set[str] = set()
        self.carried: str | None = None  # the id of the credential the create carried
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=look, daemon=True) for look in (self._nova, self._vm)]

    def __enter__(self) -> Watch:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def _mark(self, what: str) -> None:
        self.marks.setdefault(what, time.time())

    def _nova(self) -> None:
        while not self.stop.is_set() and "handed" not in self.marks:
            for server in self.conn.compute.servers(details=True, name=f"^{self.name}$"):
                if server.status == "DELETED":
                    continue
                self._mark("created")  # a flavor without room (No valid host) is a create too: its window starts
                if server.status == "ACTIVE":
                    self.server_ids.add(server.id)
                    self._mark("active")
                value = (server.metadata or {}).get(paths.HANDOFF_KEY)
                if value:
                    self._mark("carried")
                    credential = json.loads(value)["c"]
                    self.carried = self.carried or credential
                    if credential != self.carried:
                        self._mark("handed")
            time.sleep(0.1)

    def _vm(self) -> None:
        while not self.stop.is_set() and "guarded" not in self.marks:
            address = next((ip.floating_ip_address for ip in self.conn.network.ips(description=f"gpu-rent {self.name}")
                            if ip.port_id), None)  # fmt: skip
            said = ssh(address, f"cat {paths.STATUS_FILE}", timeout=5).stdout if address else ""
            try:
                report_ = json.loads(said or "{}")
            except ValueError:
                report_ = {}
            credential = report_.get("credential") or {}
            if report_.get("server_id") in self.server_ids and credential.get("state") == "ok":
                self._mark("guarded")
            time.sleep(0.25)


def create_round_trip(conn, name: str) -> float:
    """One POST /servers from the stopped project's volumes, as up's create is; the server deleted at once."""
    boot = conn.block_storage.find_volume(f"{name}-boot", ignore_missing=False)
    data = conn.block_storage.find_volume(f"{name}-data", ignore_missing=False)
    net = next(n for n in conn.network.networks() if n.name.startswith(f"{name}-net-"))
    pool = net.name.removeprefix(f"{name}-net-")
    flavor = conn.compute.find_flavor("gpu.l4.1", ignore_missing=False)
    mapping = [{"boot_index": index, "uuid": volume.id, "source_type": "volume", "destination_type": "volume",
                "delete_on_termination": False} for index, volume in ((0, boot), (-1, data))]  # fmt: skip
    started = time.perf_counter()
    server = conn.compute.create_server(name=f"{name}-probe", flavor_id=flavor.id, networks=[{"uuid": net.id}],
                                        availability_zone=pool, block_device_mapping=mapping)  # fmt: skip
    seconds = time.perf_counter() - started
    conn.compute.wait_for_server(server, status="ACTIVE", failures=["ERROR"], wait=300, interval=0.5)
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=300, interval=0.5)
    return seconds


def life(conn, project: Path, label: str) -> dict[str, float]:
    with Watch(conn, project.name) as watch:
        started = time.monotonic()
        result = gpu_rent(project, "up", "--yes", "--no-tunnel")
        if result.returncode != 0:
            raise RuntimeError(f"gpu-rent up failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        deadline = time.monotonic() + 120
        while "guarded" not in watch.marks and time.monotonic() < deadline:
            time.sleep(0.2)
    marks = watch.marks
    print(f"{label:<5} up {time.monotonic() - started:5.1f} s; servers ACTIVE {len(watch.server_ids)}; "
          + ", ".join(f"{k} +{v - marks['created']:.2f} s" for k, v in marks.items()), flush=True)  # fmt: skip
    if len(watch.server_ids) != 1:
        raise RuntimeError(f"{label}: {len(watch.server_ids)} servers became ACTIVE, not one")
    return marks


def main() -> int:
    reason = ground_missing()
    if reason:
        print(f"bench/unguarded.py: {reason}")
        return 2
    conn = connect("ground")
    tmp = Path(tempfile.mkdtemp(prefix="gpu-rent-bench-unguarded-"))
    project = make_project(tmp, unique("bench-unguarded"))
    try:
        cold = life(conn, project, "cold")
        stopped = gpu_rent(project, "stop")
        if stopped.returncode != 0:
            raise RuntimeError(f"gpu-rent stop failed:\n{stopped.stderr[-3000:]}")
        trip = create_round_trip(conn, project.name)
        warm = life(conn, project, "warm")
        print(f"create round trip {trip:.2f} s (POST /servers)")
        for label, marks, start, end, name, goal in (
            ("create -> a credential carried (warm)", warm, "created", "carried", "unguarded-window", "<= 1"),
            ("own credential after ACTIVE (warm)", warm, "active", "handed", "unguarded-handoff", "<= 2"),
            ("own credential after ACTIVE (cold)", cold, "active", "handed", "unguarded-handoff-cold", "<= 2"),
            ("create -> killer proven (warm)", warm, "created", "guarded", "unguarded-warm", "<= 5"),
            ("create -> killer proven (cold)", cold, "created", "guarded", "unguarded-cold", "<= 5"),
        ):
            if start not in marks or end not in marks:
                print(f"RATIO {label}: not measured ({end} never seen)")
                continue
            seconds = marks[end] - marks[start]
            print(f"RATIO {label}: {seconds:.2f} s = {seconds / trip:.2f}x the create round trip (goal {goal}x)")
            report(name, seconds / trip, goal, "POST /servers round trip")
    finally:
        clean = destroyed(project, tmp)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
