"""gpu-rent swarmui_ready: wait until SwarmUI's self-started ComfyUI backends of gpu-rent's all run.

Installed on the VM by the swarmui role, in the on_vm package with the rule of which backends are ours
(comfy_backend, the idle-killer's too), and run there as `python3 -m on_vm.swarmui_ready` after every
(re)start of SwarmUI (the role's and the seed role's). Prints one line and exits 0 when ready, 1 when not, naming why:

- SwarmUI's API answers errors as HTTP 401/400 with a JSON body (src/WebAPI/API.cs): the body is read,
  an `invalid_session_id` takes a new session, any other `error_id` is named at once.
- A SwarmUI older than --min-version (GetNewSession's `version`) is refused: the oldest gpu-rent
  supports (GetGlobalStatus for the idle-killer, extensions built at start for seeding).
- Readiness is judged from ListBackends, on gpu-rent's own backends (type comfyui_selfstart with
  StartScript --start-script, trimmed as upstream trims it, or an absolute path to it: comfy_backend.py),
  never from the aggregate backend_status: that says `errored` as soon as ANY backend errored
  (BackendHandler.CurrentBackendStatus), a user's offline extra one included.
- After --grace seconds, an errored backend of ours, or none of ours enabled, fails at once: upstream
  gives up on a failed first launch, so waiting out --timeout would only delay the same answer.
- While the API does not answer, --unit's state is read: a unit that is not running and not about
  to (its ExecCondition skipped the start: no data volume) fails at once with its journal's last line.
- Ready, with --loopback-only: what listens on the URL's port (`ss -ltnH`) must be 127.0.0.1 alone -
  SwarmUI is reached through the SSH tunnel, never from the network. Here, not in a task of its own:
  one SSH round trip fewer for each run of the role.

Standard library only: the VM has python3 and nothing else is installed for this.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from .comfy_backend import OUR_START_SCRIPT, is_ours

REQUEST_TIMEOUT = 30


class Refused(Exception):
    """An answer that waiting cannot change; the run fails with its words."""


def version_tuple(text: str) -> tuple[int, ...]:
    """The leading numbers of a version ("0.9.8.2.DEV123" -> (0, 9, 8, 2)); () when it has none."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def older(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) < minimum + (0,) * (width - len(minimum))


def post(url: str, body: dict) -> dict:
    """POST JSON, the reply's JSON whatever its HTTP status (SwarmUI's errors are 400/401 with a body)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as reply:
            text = reply.read()
            status = reply.status
    except urllib.error.HTTPError as error:
        text, status = error.read(), error.code
    try:
        data = json.loads(text)
    except ValueError:
        raise OSError(f"HTTP {status} without JSON: {text[:200]!r}") from None
    if not isinstance(data, dict):
        raise OSError(f"HTTP {status}: not a JSON object: {text[:200]!r}")
    data.setdefault("_http_status", status)
    return data


def api_error(route: str, reply: dict) -> str | None:
    if "error_id" not in reply and "error" not in reply:
        return None
    status = reply.get("_http_status")
    return f"{route} answered HTTP {status} {reply.get('error_id', 'error')}: {reply.get('error', '')}".rstrip(": ")


def ours(backends: dict, start_script: str) -> list[dict]:
    """gpu-rent's backends in a ListBackends reply: self-started ComfyUI on dlbackend's main.py, by the rule the
    idle-killer counts them by (comfy_backend.is_ours)."""
    found = [backend for backend in backends.values() if is_ours(backend, start_script)]
    return sorted(found, key=lambda b: int(b.get("id", 0)))


def describe(backend: dict) -> str:
    gpu = (backend.get("settings") or {}).get("GPU_ID", "?")
    return f"backend {backend.get('id')} ({backend.get('title') or 'untitled'}, GPU {gpu}) is {backend.get('status')}"


def judge(backends: dict, start_script: str) -> tuple[str, str]:
    """("ready" | "bad" | "wait", words) for one ListBackends reply."""
    mine = ours(backends, start_script)
    enabled = [b for b in mine if b.get("enabled", True) and b.get("status") != "disabled"]
    if not mine:
        others = ", ".join(f"{b.get('id')} {b.get('type')} {b.get('status')}" for b in backends.values()) or "none"
        return "bad", f"SwarmUI has no self-starting ComfyUI backend on {start_script} (its backends: {others})"
    if not enabled:
        return "bad", "gpu-rent's ComfyUI backends are all disabled: " + "; ".join(describe(b) for b in mine)
    errored = [b for b in enabled if b.get("status") == "errored"]
    if errored:
        return "bad", "gpu-rent's ComfyUI " + "; ".join(describe(b) for b in errored)
    waiting = [b for b in enabled if b.get("status") != "running"]
    if waiting:
        return "wait", "gpu-rent's ComfyUI " + "; ".join(describe(b) for b in waiting)
    ids = ", ".join(str(b.get("id")) for b in enabled)
    return "ready", f"ready: gpu-rent's ComfyUI backend{'s' if len(enabled) > 1 else ''} {ids} running"


def unit_stopped(unit: str) -> str | None:
    """Why the systemd unit does not run and will not by itself (its journal's last line), or None
    while it runs, starts or waits to be restarted (activating)."""
    try:
        shown = subprocess.run(
            ["systemctl", "show", "-p", "ActiveState", "-p", "Result", "--value", unit],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.split()  # fmt: skip
        if not shown or shown[0] not in ("inactive", "failed"):
            return None
        last = subprocess.run(
            ["journalctl", "-u", unit, "-n", "1", "-o", "cat", "--no-pager"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None  # no systemd to ask: the timeout decides
    result = shown[1] if len(shown) > 1 else "unknown"
    return f"{unit} is {shown[0]} ({result}){': ' + last if last else ''}"


def wait(args: argparse.Namespace, clock=time.monotonic, sleep=time.sleep) -> str:
    """The ready line; raises Refused with the reason otherwise."""
    api = args.url.rstrip("/") + "/API"
    minimum = version_tuple(args.min_version)
    start = clock()
    session: str | None = None
    last = "its API did not answer"
    while True:
        elapsed = clock() - start
        try:
            if session is None:
                reply = post(f"{api}/GetNewSession", {})
                if "session_id" not in reply:
                    raise Refused(api_error("GetNewSession", reply) or f"GetNewSession answered {reply}")
                version = str(reply.get("version", ""))
                if not version_tuple(version) or older(version_tuple(version), minimum):
                    raise Refused(
                        f"SwarmUI {version or 'of no version'} is older than {args.min_version}, the oldest "
                        "gpu-rent supports (the idle-killer reads GetGlobalStatus, seeding needs extensions "
                        "built at start; docs/on-the-vm.md, SwarmUI versions)"
                    )
                session = reply["session_id"]
            reply = post(f"{api}/ListBackends", {"session_id": session})
            if reply.get("error_id") == "invalid_session_id":
                session, last = None, "its session ended (SwarmUI restarted?)"
                continue
            error = api_error("ListBackends", reply)
            if error:
                raise Refused(error)
            reply.pop("_http_status", None)
            verdict, last = judge(reply, args.start_script)
            if verdict == "ready":
                return last
            if verdict == "bad" and elapsed >= args.grace:
                raise Refused(f"{last} ({elapsed:.0f} s after the start)")
        except (OSError, http.client.HTTPException) as error:  # not listening yet, reset, timed out
            last = f"its API did not answer: {getattr(error, 'reason', None) or error}"
            why = unit_stopped(args.unit) if args.unit else None
            if why:
                raise Refused(f"{why} ({last})") from None
        if elapsed >= args.timeout:
            raise Refused(f"not ready after {args.timeout} s: {last}")
        sleep(args.delay)


def not_loopback_only(port: int, listening: list[str]) -> str | None:
    """Why the port is not 127.0.0.1's alone, from `ss -ltnH` lines (the local address is the 4th column)."""
    local = [fields[3] for fields in map(str.split, listening) if len(fields) > 3]
    if local and all(address == f"127.0.0.1:{port}" for address in local):
        return None
    return (
        f"its port {port} listens on {', '.join(local) or 'nothing'}: only 127.0.0.1 is allowed "
        "(it is reached through the SSH tunnel, never from the network)"
    )


def listeners(port: int) -> list[str]:
    try:
        shown = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise Refused(f"ss could not list what listens on port {port}: {e}") from None
    if shown.returncode != 0:
        raise Refused(f"ss could not list what listens on port {port}: {shown.stderr.strip()}")
    return shown.stdout.splitlines()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:7801", help="SwarmUI, on the VM")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait in all")
    parser.add_argument("--grace", type=float, default=60, help="seconds before an errored/absent backend fails")
    parser.add_argument("--delay", type=float, default=3, help="seconds between two looks")
    parser.add_argument("--min-version", default="0.9.8", help="oldest SwarmUI accepted")
    parser.add_argument("--start-script", default=OUR_START_SCRIPT, help="StartScript of ours")
    parser.add_argument("--unit", default="", help="SwarmUI's systemd unit, read while its API does not answer")
    parser.add_argument("--loopback-only", action="store_true", help="when ready, refuse a port not 127.0.0.1's alone")
    args = parser.parse_args(argv)
    try:
        said = wait(args)
        if args.loopback_only:
            port = urllib.parse.urlsplit(args.url).port or 80
            why = not_loopback_only(port, listeners(port))
            if why:
                raise Refused(why)
        print(said)
    except Refused as refused:
        print(str(refused))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
