"""The idle-killer on the VM: each tick looks at SwarmUI and the disk, decides, records why, and
deletes this server through the OpenStack API when it has been idle long enough.

Runs on the VM from a systemd timer (the idle_killer role installs it with idle_decision.py
beside it), so it is standard library only. Commands:

  tick    look, decide (idle_decision.decide), write the status file and one journal line; delete
          the server when the decision says so
  check   authenticate with the credential only, and record whether Keystone accepts it

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
    from gpu_rent.idle_decision import DELETE, Decision, Limits, Memory, Observation, decide
except ImportError:  # on the VM: idle_decision.py lies beside this file
    from idle_decision import DELETE, Decision, Limits, Memory, Observation, decide  # type: ignore[no-redef]

# journald reads a "<N>" prefix as the line's priority: 2 crit, 4 warning, 6 info
CRIT, WARNING, INFO = "<2>", "<4>", "<6>"
HTTP_TIMEOUT = 10
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
    # ComfyUI's own queue (the Comfy Workflow tab can bypass SwarmUI's counters); self-started
    # backends take ports from 7820 on.
    comfy_ports: tuple[int, ...] = tuple(range(7820, 7830))
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
        for key in ("comfy_ports", "models_dirs"):
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
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read() or b"{}")


def swarm_status(url: str, session_id: str | None) -> tuple[dict | None, str | None, str | None]:
    """GetGlobalStatus (all sessions' counters, not this caller's): (answer, error, session id)."""
    try:
        for _ in range(2):
            if not session_id:
                session_id = _post_json(f"{url}/API/GetNewSession", {}).get("session_id")
            answer = _post_json(f"{url}/API/GetGlobalStatus", {"session_id": session_id})
            if answer.get("error_id") == "invalid_session_id":  # SwarmUI restarted: sessions are gone
                session_id = None
                continue
            return answer, None, session_id
        return None, "SwarmUI refuses every new session", None
    except (OSError, ValueError) as e:
        return None, _why(e), None


def comfy_queue(ports: tuple[int, ...]) -> int:
    """Prompts running or pending in every ComfyUI that answers on 127.0.0.1 at one of the ports."""
    total = 0
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/queue", timeout=2) as reply:
                queue = json.loads(reply.read())
        except (OSError, ValueError):
            continue  # nothing there, or not a ComfyUI
        if isinstance(queue, dict):
            total += sum(len(queue.get(k) or ()) for k in ("queue_running", "queue_pending"))
    return total


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


def observe(cfg: Config, status: dict, now: float) -> tuple[Observation, str | None]:
    """One look at everything that may keep the VM; also the SwarmUI session to reuse next tick."""
    answer, error, session_id = swarm_status(cfg.swarmui_url, status.get("session_id"))
    seen = Observation(
        now=now,
        booted_at=max(float(status.get("booted_at") or now), cfg.armed_at),
        status=answer,
        error=error,
        comfy_queue=comfy_queue(cfg.comfy_ports),
        downloads=fresh_downloads(cfg.models_dirs, now),
        seeding_until=read_time(cfg.seeding_lock),
        hold_until=read_time(cfg.hold_file),
    )
    return seen, session_id


def tick(cfg: Config, now: float | None = None, say=print) -> dict:
    with status_lock(Path(cfg.status_file)):
        return _tick(cfg, now, say)


def _tick(cfg: Config, now: float | None, say) -> dict:
    path = Path(cfg.status_file)
    before = load_status(path)
    now = time.time() if now is None else now
    seen, session_id = observe(cfg, before, now)
    memory = Memory(**before["memory"])
    decision = decide(seen, cfg.limits(), memory)
    credential = dict(before["credential"] or {})
    credential.setdefault("state", "unchecked")
    status = {
        "server_id": cfg.server_id,
        "booted_at": before.get("booted_at") or now,
        "armed_at": cfg.armed_at,
        "tick_at": now,
        "session_id": session_id,
        "action": decision.action,
        "reason": decision.reason,
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
