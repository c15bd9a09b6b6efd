"""The idle-killer on the VM: each tick looks at SwarmUI and the disk, decides, records why, and
deletes this server through the OpenStack API when it has been idle long enough.

Runs on the VM from a systemd timer (the idle_killer role installs it with idle_decision.py
beside it), so it is standard library only. Commands:

  tick    look, decide (idle_decision.decide), write the status file and one journal line; delete
          the server when the decision says so
  check   authenticate with the credential only, and record whether Keystone accepts it

What a tick looks at: SwarmUI's GetGlobalStatus (every session's counters) and ListBackends (our
self-start ComfyUI backends, one per GPU) in one session kept from tick to tick; the queue of every
ComfyUI process in swarmui.service's cgroup, at the port its command line names (the port moves at
each launch); partial downloads under Models; the seeding lock, the hold, and the data volume's
mount and marker. SwarmUI's errors are read from their HTTP 401/400 bodies and named by error_id.

The config (/root/.gpu-rent/idle-killer.json, 0600) holds the credential; the status file holds
no secret, and is what `gpu-rent status` reads over SSH.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    from gpu_rent.idle_decision import (
        DELETE,
        OUR_START_SCRIPT,
        Decision,
        Limits,
        Memory,
        Observation,
        backends_line,
        decide,
        our_backends,
    )
except ImportError:  # on the VM: idle_decision.py lies beside this file
    from idle_decision import (  # type: ignore[no-redef]
        DELETE,
        OUR_START_SCRIPT,
        Decision,
        Limits,
        Memory,
        Observation,
        backends_line,
        decide,
        our_backends,
    )

# journald reads a "<N>" prefix as the line's priority: 2 crit, 4 warning, 6 info
CRIT, WARNING, INFO = "<2>", "<4>", "<6>"
HTTP_TIMEOUT = 10
# ComfyUI answers its routes while a prompt runs (aiohttp beside the execution thread); a busy GPU
# host may make it slow, so it is given more than a moment before it counts as not answering.
COMFY_TIMEOUT = 5
# A "*.tmp" under Models written to within this long means a download runs (SwarmUI's own
# downloads write <name>.download.tmp, its workflow auto-downloads <file>.tmp).
DOWNLOAD_FRESH_SECONDS = 120
FUTURE_SLACK = 5  # seconds a partial file's mtime may lie ahead of this clock and still count
RETRY_PAUSE = 2.0  # seconds before the second try of a transient failure, doubled for the third


@dataclass(frozen=True)
class Config:
    server_id: str
    auth_url: str  # Keystone v3, e.g. https://cloud.api.selcloud.ru/identity/v3
    credential_id: str | None  # the application credential; None: armed blind (no cloud given)
    credential_secret: str | None = field(repr=False)
    region_name: str | None = None
    interface: str = "public"
    idle_seconds: float = 1800
    grace_seconds: float = 2700
    cap_seconds: float = 3600
    swarmui_url: str = "http://127.0.0.1:7801"
    # gpu-rent's backends in ListBackends: self-start ComfyUI from this script (roles/swarmui)
    comfy_start_script: str = OUR_START_SCRIPT
    # ComfyUI's own queues (the Comfy Workflow tab can bypass SwarmUI's counters) are read at the
    # ports of the ComfyUI processes in this unit's cgroup; comfy_ports, when given, instead.
    swarmui_unit: str = "swarmui.service"
    cgroup_root: str = "/sys/fs/cgroup"
    proc_root: str = "/proc"
    comfy_ports: tuple[int, ...] = ()
    # the data volume SwarmUI's folders are bound from, and the file that says gpu-rent made it;
    # an empty data_mount: not checked
    data_mount: str = "/mnt/swarm_data"
    data_marker: str = ".gpu-rent-ready"
    models_dirs: tuple[str, ...] = ("/mnt/swarm_data/Models",)
    hold_file: str = "/mnt/swarm_data/.gpu-rent-hold-until"
    seeding_lock: str = "/run/gpu-rent/seeding"
    status_file: str = "/run/gpu-rent/idle-killer.json"
    credential_expires_at: str | None = None
    credential_check_seconds: float = 900  # how often a quiet tick proves the credential still works
    tick_seconds: float = 60  # the timer's interval: a deadline before the next tick is waited for
    armed_at: float = 0  # when this config was written (the role arms; the grace runs from then too)

    @classmethod
    def load(cls, path: Path) -> Config:
        raw = json.loads(path.read_text())
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        for key in ("comfy_ports", "models_dirs"):  # JSON lists
            if key in known:
                known[key] = tuple(known[key])
        for key in ("idle_seconds", "grace_seconds", "cap_seconds", "credential_check_seconds", "tick_seconds"):
            if key in known:
                known[key] = float(known[key])
        known.setdefault("armed_at", path.stat().st_mtime)
        return cls(**known)

    def limits(self) -> Limits:
        return Limits(idle_seconds=self.idle_seconds, grace_seconds=self.grace_seconds, cap_seconds=self.cap_seconds)


class CredentialRefused(Exception):
    """Keystone or Nova said no to the credential (401/403): the killer is blind until re-armed."""


class Unreachable(Exception):
    """A transient failure: no answer, a timeout, a 5xx. The next try may work."""


# ------------------------------------------------------------------ looking
def _post_json(url: str, body: dict, timeout: float = HTTP_TIMEOUT) -> dict:
    """A POST and its JSON object. SwarmUI's API errors are answers too: src/WebAPI/API.cs sends
    HTTP 401 for an unknown session (error_id invalid_session_id) and HTTP 400 for the others
    (bad_permissions, bad_route, basic_api ...), each with the JSON error as its body."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            answer = json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as e:
        if not 400 <= e.code < 500:
            raise
        try:
            answer = json.loads(e.read() or b"{}")
        except (OSError, ValueError):
            raise e from None
        if not _is_error(answer):
            raise e from None
    if not isinstance(answer, dict):
        raise ValueError(f"not a JSON object: {str(answer)[:60]}")
    return answer


def _is_error(answer: object) -> bool:
    return isinstance(answer, dict) and ("error_id" in answer or "error" in answer)


@dataclass(frozen=True)
class SwarmLook:
    status: dict | None  # GetGlobalStatus's answer, or the error it answered with (+ "route")
    error: str | None  # why SwarmUI did not answer
    backends: tuple[str, ...] | None  # our backends' states from ListBackends; None: not read
    backends_error: str | None  # why ListBackends was not read
    session_id: str | None  # the session to reuse next tick


def swarm_look(url: str, session_id: str | None, start_script: str = OUR_START_SCRIPT) -> SwarmLook:
    """GetGlobalStatus (all sessions' counters, not this caller's) and ListBackends, in one session.

    The session is kept from tick to tick (SwarmUI keeps sessions across its restarts, in
    Data/Users.ldb); one SwarmUI does not know (HTTP 401 invalid_session_id) is replaced at once,
    within the tick. Any other error is the answer, named by its error_id."""
    session = [session_id]

    def call(route: str) -> dict:
        for _ in range(2):
            if not session[0]:
                new = _post_json(f"{url}/API/GetNewSession", {})
                if _is_error(new) or not isinstance(new.get("session_id"), str):
                    return {"error": "no session_id in its answer"} | new | {"route": "GetNewSession"}
                session[0] = new["session_id"]
            answer = _post_json(f"{url}/API/{route}", {"session_id": session[0]})
            if answer.get("error_id") != "invalid_session_id":
                return answer | {"route": route} if _is_error(answer) else answer
            session[0] = None  # unknown to SwarmUI (expired, or its Data lost): a new one, now
        return answer | {"route": route}  # a session SwarmUI made a moment ago, refused

    try:
        status = call("GetGlobalStatus")
    except (OSError, ValueError) as e:
        return SwarmLook(None, _why(e), None, None, session[0])
    if _is_error(status):
        return SwarmLook(status, None, None, None, session[0])
    backends, backends_error = None, None
    try:
        listing = call("ListBackends")
        if _is_error(listing):
            backends_error = f"{listing.get('error_id') or ''} {listing.get('error') or ''}".strip()
        else:
            backends = our_backends(listing, start_script)
    except (OSError, ValueError) as e:
        backends_error = _why(e)
    return SwarmLook(status, None, backends, backends_error, session[0])


def unit_pids(cgroup_root: str, unit: str, proc: str = "/proc") -> list[int]:
    """The processes of a systemd service: its cgroup's (cgroup v2), else every process whose
    /proc/<pid>/cgroup names the unit (cgroup v1, or a cgroup tree mounted elsewhere)."""
    top = Path(cgroup_root, "system.slice", unit)
    if top.is_dir():
        pids = []
        for folder, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    pids += [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
        return pids
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(proc):
            if not entry.name.isdigit():
                continue
            try:
                lines = Path(entry.path, "cgroup").read_text().splitlines()
            except OSError:
                continue  # ended meanwhile
            if any(unit in line.split(":", 2)[-1].split("/") for line in lines):
                pids.append(int(entry.name))
    return pids


def comfy_port(argv: list[str]) -> int | None:
    """The port of a ComfyUI from its command line, None when it is none: SwarmUI starts it as
    `<venv>/bin/python3 -s main.py <ExtraArgs> --port N <args>` (NetworkBackendUtils.DoSelfStart;
    ComfyUI's comfy/cli_args.py reads --port, the last one given)."""
    if not any(os.path.basename(a) == "main.py" for a in argv):
        return None
    port = None
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            port = argv[i + 1]
        elif arg.startswith("--port="):
            port = arg.split("=", 1)[1]
    try:
        return int(port) if port is not None else None
    except ValueError:
        return None


def live_comfy_ports(cgroup_root: str, unit: str, proc: str = "/proc") -> tuple[int, ...]:
    """The ports of the ComfyUI processes SwarmUI runs now. They move: the first gets 7821, each
    (re)launch the next (NetworkBackendUtils.GetNextPort), +0..1999 with BackendPortRandomize."""
    ports = set()
    for pid in unit_pids(cgroup_root, unit, proc):
        try:
            argv = Path(proc, str(pid), "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # ended meanwhile
        port = comfy_port(argv)
        if port is not None:
            ports.add(port)
    return tuple(sorted(ports))


def comfy_queues(ports: tuple[int, ...]) -> list[dict]:
    """Each ComfyUI's own queue, running and pending (ComfyUI server.py GET /prompt:
    exec_info.queue_remaining); None for one that does not answer (still loading, or gone)."""
    found = []
    for port in ports:
        queue = None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/prompt", timeout=COMFY_TIMEOUT) as reply:
                answer = json.loads(reply.read())
            queue = int(answer["exec_info"]["queue_remaining"])
        except (OSError, ValueError, TypeError, KeyError):
            pass
        found.append({"port": port, "queue": queue})
    return found


def data_volume_problem(mount: str, marker: str) -> str | None:
    """What is wrong with the data volume, in words; None when it is mounted with its marker (a VM
    the cloud booted without gpu-rent may run SwarmUI on the boot disk's empty folders)."""
    if not mount:
        return None
    if not os.path.ismount(mount):
        return f"not mounted at {mount}"
    if not os.path.exists(os.path.join(mount, marker)):
        return f"at {mount} lacks its marker {marker}"
    return None


def fresh_downloads(dirs: tuple[str, ...], now: float, fresh: float = DOWNLOAD_FRESH_SECONDS) -> tuple[str, ...]:
    """Partial files being written under the model folders, newest first, as paths under their folder."""
    found: list[tuple[float, str]] = []
    for top in dirs:
        for folder, _dirs, files in os.walk(top):
            for name in files:
                if not name.endswith(".tmp"):
                    continue
                path = os.path.join(folder, name)
                try:
                    mtime = os.stat(path).st_mtime
                except OSError:
                    continue  # renamed to its final name between the listing and the look
                # a clock ahead (a file copied with its mtime from a laptop) must not keep the VM for ever
                if -FUTURE_SLACK <= now - mtime <= fresh:
                    found.append((mtime, os.path.relpath(path, top)))
    return tuple(p for _, p in sorted(found, reverse=True))


def read_time(path: str) -> float | None:
    """A unix time written alone in a file (the hold, the seeding lock); None when absent or unreadable."""
    try:
        return float(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ------------------------------------------------------------------ acting
def _why(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error) or type(error).__name__


def authenticate(cfg: Config) -> tuple[str, list]:
    """A token and the service catalogue, from the application credential."""
    if not cfg.credential_id or not cfg.credential_secret:
        raise CredentialRefused("no credential in the config (armed without the cloud)")
    body = {"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
        "id": cfg.credential_id, "secret": cfg.credential_secret}}}}  # fmt: skip
    request = urllib.request.Request(
        cfg.auth_url.rstrip("/") + "/auth/tokens",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
            token = reply.headers["X-Subject-Token"]
            catalog = json.loads(reply.read())["token"].get("catalog") or []
    except urllib.error.HTTPError as e:
        if e.code in (401, 403, 404):
            raise CredentialRefused(f"Keystone refused the credential ({_why(e)})") from None
        raise Unreachable(f"Keystone: {_why(e)}") from None
    except (OSError, ValueError, KeyError) as e:
        raise Unreachable(f"Keystone at {cfg.auth_url}: {_why(e)}") from None
    return token, catalog


def endpoint(catalog: list, service_type: str, interface: str, region: str | None) -> str:
    found = [
        ep
        for service in catalog
        if service.get("type") == service_type
        for ep in service.get("endpoints") or ()
        if ep.get("interface") == interface and region in (None, ep.get("region_id"), ep.get("region"))
    ]
    regions = {ep.get("region_id") or ep.get("region") for ep in found}
    if region is None and len(regions) > 1:  # a DELETE in the wrong region answers 404: never guess
        raise Unreachable(f"{service_type} in several regions ({', '.join(sorted(map(str, regions)))}): no region set")
    if found:
        return found[0]["url"].rstrip("/")
    raise Unreachable(f"no {interface} {service_type} endpoint{f' in {region}' if region else ''} in the catalogue")


def delete_server(cfg: Config) -> str:
    """Delete this server (never its volumes: Nova keeps volumes made with delete_on_termination false)."""
    token, catalog = authenticate(cfg)
    url = f"{endpoint(catalog, 'compute', cfg.interface, cfg.region_name)}/servers/{cfg.server_id}"
    request = urllib.request.Request(url, headers={"X-Auth-Token": token}, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT):
            return f"asked Nova to delete server {cfg.server_id}"
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return f"server {cfg.server_id} is already gone"
        body = e.read().decode(errors="replace")[:300]
        if e.code == 409 and "delet" in body.lower():  # a delete (ours, a tick ago) is under way
            return f"server {cfg.server_id} is being deleted already"
        if e.code == 409:  # locked, or another task runs: try again next tick, say which
            raise Unreachable(f"Nova: HTTP 409 {' '.join(body.split())}") from None
        if e.code in (401, 403):
            raise CredentialRefused(f"Nova refused to delete server {cfg.server_id} ({_why(e)})") from None
        raise Unreachable(f"Nova: {_why(e)}") from None
    except OSError as e:
        raise Unreachable(f"Nova at {url}: {_why(e)}") from None


def with_retries(action, tries: int = 3):
    """Transient failures are tried again a few times within the tick; the next tick tries anew."""
    for attempt in range(tries):
        try:
            return action()
        except Unreachable:
            if attempt == tries - 1:
                raise
            time.sleep(RETRY_PAUSE * (attempt + 1))
    raise AssertionError("unreachable")


# ------------------------------------------------------------------ one tick
def load_status(path: Path) -> dict:
    """The last tick's record, each field checked: a damaged file must never stop the killer."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        status = {}
    if not isinstance(status, dict):
        status = {}
    for key in ("booted_at", "tick_at", "fires_at"):
        if key in status and _number(status[key]) is None:
            status.pop(key)
    memory = status.get("memory") if isinstance(status.get("memory"), dict) else {}
    status["memory"] = {k: _number(memory.get(k)) for k in Memory.__dataclass_fields__}
    credential = status.get("credential") if isinstance(status.get("credential"), dict) else {}
    credential["checked_at"] = _number(credential.get("checked_at"))
    status["credential"] = credential
    if not isinstance(status.get("session_id"), str):
        status.pop("session_id", None)
    return status


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def write_status(path: Path, status: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=path.name + ".", suffix=".partial", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(status, indent=1, sort_keys=True) + "\n")
    os.chmod(partial, 0o644)
    os.replace(partial, path)


@contextlib.contextmanager
def status_lock(path: Path):
    """One reader-writer of the status file at a time: a tick, or the check the role runs beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def observe(cfg: Config, status: dict, now: float) -> tuple[Observation, SwarmLook, list[dict]]:
    """One look at everything that may keep the VM; also what SwarmUI and its ComfyUIs said."""
    swarm = swarm_look(cfg.swarmui_url, status.get("session_id"), cfg.comfy_start_script)
    ports = cfg.comfy_ports or live_comfy_ports(cfg.cgroup_root, cfg.swarmui_unit, cfg.proc_root)
    comfy = comfy_queues(ports)
    seen = Observation(
        now=now,
        booted_at=max(float(status.get("booted_at") or now), cfg.armed_at),
        status=swarm.status,
        error=swarm.error,
        backends=swarm.backends,
        backends_error=swarm.backends_error,
        comfy_queue=sum(c["queue"] or 0 for c in comfy),
        comfy_silent=tuple(c["port"] for c in comfy if c["queue"] is None),
        downloads=fresh_downloads(cfg.models_dirs, now),
        seeding_until=read_time(cfg.seeding_lock),
        hold_until=read_time(cfg.hold_file),
        data_volume=data_volume_problem(cfg.data_mount, cfg.data_marker),
    )
    return seen, swarm, comfy


def tick(cfg: Config, now: float | None = None, say=print) -> dict:
    with status_lock(Path(cfg.status_file)):
        return _tick(cfg, now, say)


def _tick(cfg: Config, now: float | None, say) -> dict:
    path = Path(cfg.status_file)
    before = load_status(path)
    now = time.time() if now is None else now
    seen, swarm, comfy = observe(cfg, before, now)
    memory = Memory(**before["memory"])
    decision = decide(seen, cfg.limits(), memory)
    credential = dict(before["credential"] or {})
    credential.setdefault("state", "unchecked")
    status = {
        "server_id": cfg.server_id,
        "booted_at": before.get("booted_at") or now,
        "armed_at": cfg.armed_at,
        "tick_at": now,
        "session_id": swarm.session_id,
        "action": decision.action,
        "reason": decision.reason,
        # gpu-rent's ComfyUI backends in SwarmUI ("2 of 2 ComfyUI backends running"), and each
        # ComfyUI process found with its own queue (None: it does not answer yet)
        "backends": backends_line(seen.backends),
        "comfyui": comfy,
        "fires_at": decision.fires_at,
        "memory": asdict(decision.memory),
        "limits": asdict(cfg.limits()),
        "credential": credential,
        "credential_expires_at": cfg.credential_expires_at,
    }
    if decision.action == DELETE:
        status.update(_delete(cfg, credential, now, say))
        loud = CRIT if credential.get("state") == "refused" else WARNING
        say(f"{loud}{decision.action}: {decision.reason}; {status['acted']}")
    else:
        if now - (credential.get("checked_at") or 0) >= cfg.credential_check_seconds:
            credential.update(_check(cfg, now))
        say(_line(decision, credential))
    write_status(path, status)
    return status


def _line(decision: Decision, credential: dict) -> str:
    when = f"; fires at {time.strftime('%H:%M:%S', time.localtime(decision.fires_at))}" if decision.fires_at else ""
    line = f"{decision.action}: {decision.reason}{when}"
    if credential.get("state") == "refused":
        return f"{CRIT}{line}; CREDENTIAL REFUSED, this VM cannot delete itself: {credential.get('message')}"
    return INFO + line


def _delete(cfg: Config, credential: dict, now: float, say) -> dict:
    try:
        done = with_retries(lambda: delete_server(cfg))
        credential.update(state="ok", checked_at=now, message=None)
        return {"acted": done, "deleted_at": time.time()}  # when Nova took the DELETE
    except CredentialRefused as e:
        credential.update(state="refused", checked_at=now, message=str(e))
        return {"acted": f"CREDENTIAL REFUSED, cannot delete this server: {e}"}
    except Unreachable as e:
        return {"acted": f"delete failed, tried again next tick: {e}"}


def _check(cfg: Config, now: float) -> dict:
    try:
        with_retries(lambda: authenticate(cfg), tries=2)
        return {"state": "ok", "checked_at": now, "message": None}
    except CredentialRefused as e:
        return {"state": "refused", "checked_at": now, "message": str(e)}
    except Unreachable as e:
        return {"state": "unreachable", "checked_at": now, "message": str(e)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-rent-idle-killer", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("tick", "check"))
    parser.add_argument("--config", default="/root/.gpu-rent/idle-killer.json")
    args = parser.parse_args(argv)
    try:
        cfg = Config.load(Path(args.config))
    except (OSError, ValueError, TypeError) as e:
        print(f"{CRIT}idle-killer config {args.config} unusable, this VM cannot delete itself: {e}", file=sys.stderr)
        return 2
    if args.command == "check":
        path = Path(cfg.status_file)
        result = _check(cfg, time.time())
        with status_lock(path):
            status = load_status(path)
            status["credential"] = result
            status.setdefault("server_id", cfg.server_id)
            write_status(path, status)
        print(f"credential {result['state']}" + (f": {result['message']}" if result["message"] else ""))
        return 0 if result["state"] == "ok" else 1
    status = tick(cfg)
    # A deadline that falls before the next tick is kept to the second: wait for it, look again.
    fires_at = status.get("fires_at")
    if status["action"] != DELETE and fires_at and 0 < fires_at - time.time() <= cfg.tick_seconds:
        time.sleep(max(0.0, fires_at - time.time()))
        tick(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
