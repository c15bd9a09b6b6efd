"""The swarmui role's readiness check (gpu_rent/on_vm/swarmui_ready.py) against a SwarmUI on loopback
that answers as upstream's src/WebAPI/API.cs does: errors as HTTP 401/400 with a JSON body."""

from __future__ import annotations

import contextlib
import io
import socket

import pytest

from gpu_rent.on_vm import swarmui_ready as ready
from gpu_rent.on_vm.idle_decision import our_backends
from tests.upstream_api import UpstreamAPI

MAIN = "dlbackend/ComfyUI/main.py"


def backend(id_: int, status: str, type_: str = "comfyui_selfstart", script: str = MAIN, gpu: str = "0", **extra):
    """One ListBackends entry in BackendAPI.BackendToNet's shape."""
    return {"type": type_, "status": status, "id": id_, "settings": {"StartScript": script, "GPU_ID": gpu},
            "modcount": 0, "features": [], "enabled": True, "title": f"b{id_}", "max_usages": 0} | extra  # fmt: skip


class Swarm(UpstreamAPI):
    """ListBackends on top of upstream's API checks (tests/upstream_api.py): `backends` is a list of
    replies handed out in turn (the last repeats; one with an error_id is HTTP 400); drop_session_once
    forgets every session at the next request that names one, as a SwarmUI restart without Users.ldb."""

    def __init__(self, version: str = "0.9.8.2"):
        super().__init__(version)
        self.backends: list[dict] = [{}]
        self.drop_session_once = False

    def session_refused(self, body: dict) -> tuple[int, dict] | None:
        if "session_id" in body and self.drop_session_once:
            self.drop_session_once = False
            self.sessions.clear()
        return super().session_refused(body)

    def route(self, route: str, body: dict) -> tuple[int, dict]:
        if route == "ListBackends":
            reply = self.backends.pop(0) if len(self.backends) > 1 else self.backends[0]
            return (400, reply) if "error_id" in reply else (200, reply)
        return super().route(route, body)


@pytest.fixture
def swarm():
    server = Swarm()
    yield server
    server.close()


def run(url: str, *extra: str) -> tuple[int, str]:
    """Exit code and the one line printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = ready.main(["--url", url, "--timeout", "3", "--grace", "0.3", "--delay", "0.05", *extra])
    return code, out.getvalue().strip()


def test_our_running_backend_is_ready_though_a_users_extra_backend_errored(swarm):
    # The aggregate would say "errored" here (BackendHandler.CurrentBackendStatus); ours runs.
    swarm.backends = [
        {"0": backend(0, "loading"), "1": backend(1, "errored", type_="comfyui_api")},
        {"0": backend(0, "running"), "1": backend(1, "errored", type_="comfyui_api")},
    ]
    assert run(swarm.url) == (0, "ready: gpu-rent's ComfyUI backend 0 running")


def test_every_gpu_backend_of_ours_must_run(swarm):
    swarm.backends = [
        {"0": backend(0, "running"), "1": backend(1, "loading", gpu="1")},
        {"0": backend(0, "running"), "1": backend(1, "running", gpu="1")},
    ]
    assert run(swarm.url) == (0, "ready: gpu-rent's ComfyUI backends 0, 1 running")


def test_an_ended_session_answered_401_takes_a_new_one(swarm):
    swarm.backends = [{"0": backend(0, "running")}]
    swarm.drop_session_once = True
    assert run(swarm.url)[0] == 0
    assert swarm.routes_asked().count("GetNewSession") == 2


def test_our_errored_backend_fails_after_the_grace_naming_it(swarm):
    swarm.backends = [{"0": backend(0, "errored"), "5": backend(5, "running", script="other/main.py")}]
    code, line = run(swarm.url)
    assert code == 1
    assert line.startswith("gpu-rent's ComfyUI backend 0 (b0, GPU 0) is errored (")
    assert len(swarm.asked) < 40  # failed at the grace, not at the timeout


def test_no_backend_of_ours_fails_after_the_grace_listing_the_others(swarm):
    swarm.backends = [{"2": backend(2, "running", type_="comfyui_api")}]
    code, line = run(swarm.url)
    assert code == 1
    assert (
        "has no self-starting ComfyUI backend on dlbackend/ComfyUI/main.py (its backends: 2 comfyui_api running)"
        in line
    )


@pytest.mark.parametrize(
    ("script", "mine"),
    [
        ("dlbackend/ComfyUI/main.py", True),  # as the role writes it, relative to SwarmUI's folder
        (' "dlbackend/ComfyUI/main.py"\t', True),  # ComfyUISelfStartBackend.Init trims ' ', '"', '\'', \n, \r, \t
        ("'dlbackend/ComfyUI/main.py'\r\n", True),
        ("/opt/swarmui/dlbackend/ComfyUI/main.py", True),  # absolute, as a user may write it: upstream runs it
        ('"/opt/swarmui/dlbackend/ComfyUI/main.py"', True),
        ("dlbackend\\ComfyUI\\main.py", True),  # a Backends.fds carried over from Windows
        ("C:\\SwarmUI\\dlbackend\\ComfyUI\\main.py", True),
        ("other/ComfyUI/main.py", False),
        ("/opt/swarmui/mydlbackend/ComfyUI/main.py", False),  # a path part only ends with ours
        ("dlbackend/ComfyUI/main.py.bak", False),
        ("", False),
    ],
)
def test_readiness_and_the_idle_killer_count_the_same_backends_as_ours(script, mine):
    """One rule (comfy_backend.is_ours) for both: a backend readiness missed was added again on its GPU
    (config.yml), one the killer missed read as "none of ours running"."""
    listing = {"0": backend(0, "running", script=script), "1": backend(1, "running", "comfyui_api", script=script)}
    assert [b["id"] for b in ready.ours(listing, MAIN)] == ([0] if mine else [])
    assert our_backends(listing, MAIN) == (("running",) if mine else ())


def test_all_of_ours_disabled_fails(swarm):
    swarm.backends = [{"0": backend(0, "disabled", enabled=False)}]
    code, line = run(swarm.url)
    assert code == 1 and "are all disabled" in line


def test_an_errored_backend_within_the_grace_may_still_recover(swarm):
    swarm.backends = [{"0": backend(0, "errored")}, {"0": backend(0, "running")}]
    assert run(swarm.url, "--grace", "5")[0] == 0


def test_a_swarmui_older_than_the_minimum_is_refused_naming_its_version():
    old = Swarm(version="0.9.7.0")
    try:
        code, line = run(old.url)
    finally:
        old.close()
    assert code == 1
    assert line == (
        "SwarmUI 0.9.7.0 is older than 0.9.8, the oldest gpu-rent supports (the idle-killer reads GetGlobalStatus, "
        "seeding needs extensions built at start; docs/on-the-vm.md, SwarmUI versions)"
    )


def test_a_dev_build_of_the_minimum_passes():
    assert not ready.older(ready.version_tuple("0.9.8.0.DEV123"), ready.version_tuple("0.9.8"))
    assert ready.older(ready.version_tuple("0.9.7.9"), ready.version_tuple("0.9.8"))


def test_another_api_error_is_named_at_once(swarm):
    swarm.backends = [{"error_id": "bad_permissions", "error": "You do not have permission"}]
    code, line = run(swarm.url)
    assert (code, line) == (1, "ListBackends answered HTTP 400 bad_permissions: You do not have permission")
    assert len(swarm.asked) == 2


def test_a_swarmui_that_never_answers_times_out_naming_the_connection():
    code, line = run("http://127.0.0.1:9", "--timeout", "0.3")
    assert code == 1
    assert line.startswith("not ready after 0.3 s: its API did not answer: ")


def test_a_unit_that_does_not_run_and_will_not_fails_at_once_with_its_journal_line(monkeypatch):
    # the swarmui unit's ExecCondition skipped the start (no data volume): nothing will ever listen
    asked = []

    def stopped(unit):
        asked.append(unit)
        return "swarmui is inactive (exec-condition): SwarmUI not started: the data volume is not mounted"

    monkeypatch.setattr(ready, "unit_stopped", stopped)
    code, line = run("http://127.0.0.1:9", "--timeout", "30", "--unit", "swarmui")
    assert code == 1 and asked == ["swarmui"]
    assert line.startswith("swarmui is inactive (exec-condition): SwarmUI not started: the data volume is not mounted")


def test_a_unit_still_starting_is_waited_for(monkeypatch):
    monkeypatch.setattr(ready, "unit_stopped", lambda unit: None)  # activating: a restart under way
    code, line = run("http://127.0.0.1:9", "--timeout", "0.3", "--unit", "swarmui")
    assert code == 1 and line.startswith("not ready after 0.3 s: its API did not answer: ")


def test_a_port_open_beyond_127_0_0_1_is_refused_in_words():
    assert ready.not_loopback_only(7801, ["LISTEN 0 512 127.0.0.1:7801 0.0.0.0:*"]) is None
    both = ["LISTEN 0 512 127.0.0.1:7801 0.0.0.0:*", "LISTEN 0 512 [::]:7801 [::]:*"]
    assert ready.not_loopback_only(7801, both).startswith("its port 7801 listens on 127.0.0.1:7801, [::]:7801: only")
    assert ready.not_loopback_only(7801, ["LISTEN 0 512 0.0.0.0:7801 0.0.0.0:*"]) is not None
    assert "listens on nothing" in ready.not_loopback_only(7801, [])


def test_loopback_only_reads_what_really_listens(swarm):
    """`ss` of this machine: the stand-in on 127.0.0.1 alone passes; the same port open on ::1 too is refused."""
    swarm.backends = [{"0": backend(0, "running")}]
    assert run(swarm.url, "--loopback-only")[0] == 0
    port = int(swarm.url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket(socket.AF_INET6) as also:
        also.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        also.bind(("::1", port))
        also.listen()
        code, said = run(swarm.url, "--loopback-only")
    assert code == 1 and f"[::1]:{port}" in said and "only 127.0.0.1 is allowed" in said
