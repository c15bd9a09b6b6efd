"""status over plain HTTP: the four lists read along a kept route, page after page, into the view openstacksdk's read
gives; anything unexpected is None (the SDK path then answers), and a status that needs no SDK never loads it.

The cloud here is a stand-in on loopback that answers as Nova, Cinder and Neutron do (their JSON, their links); the
ground test (tests/ground/test_rental.py) holds the HTTP view against the SDK's on a real cloud.
"""

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_rent.cloud import plain_http as cloud_http
from gpu_rent.cloud import route as cloud_route
from gpu_rent.cloud.route import Call, Route
from gpu_rent.cloud.view import FloatingIP, Volume
from gpu_rent.project import settings as config
from gpu_rent.project.state import Scope
from tests.unit.test_cloud_view import NOVA_SERVER

TOKEN = "tok-standin"
HERE = Scope("p-1", "RegionOne")  # where the stand-in's login landed


class StandIn:
    """Answers GET path?query with the body set for it; keeps every request's path and headers."""

    def __init__(self):
        self.answers: dict[str, tuple[int, object, dict]] = {}
        self.requests: list[tuple[str, dict]] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                standin.requests.append((self.path, dict(self.headers)))
                status, body, headers = standin.answers.get(self.path, (404, {"itemNotFound": {}}, {}))
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, body: object, status: int = 200, headers: dict | None = None) -> None:
        self.answers[path] = (status, body, headers or {})

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


@pytest.fixture
def standin():
    s = StandIn()
    yield s
    s.server.shutdown()
    s.server.server_close()


def route_to(
    standin: StandIn, expires_in: float = 3600, url: str = "", proxies: dict | None = None, scope: Scope = HERE
) -> Route:
    """A route to the stand-in (or to url, through the proxies)."""
    url = url or standin.url
    nova = {"OpenStack-API-Version": "compute 2.100", "X-OpenStack-Nova-API-Version": "2.100"}
    volumes, snapshots = {"OpenStack-API-Version": "volume 3.71"}, {"OpenStack-API-Version": "volume 3.65"}
    via = proxies or {}
    calls = {
        "servers": Call(f"{url}/compute/v2.1", "/servers/detail", nova, "servers", via),
        "volumes": Call(f"{url}/volume/v3/", "/volumes/detail", volumes, "volumes", via),
        "floating_ips": Call(f"{url}/network/v2.0", "/floatingips", {}, "floatingips", via),
        "snapshots": Call(f"{url}/volume/v3", "/snapshots", snapshots, "snapshots", via),
    }
    expires_at = float(int(time.time() + expires_in))
    return Route(calls, TOKEN, expires_at, True, None, 'cloud "test" (stand-in), project p', scope)


def a_cloud(standin: StandIn) -> None:
    """Two pages of servers (Nova's absolute next link), two of floating IPs (a relative one, as the api-wg's
    `links`), one of volumes and snapshots."""
    second = {**NOVA_SERVER, "id": "s2", "name": "stray", "status": "SHUTOFF"}
    next_servers = f"{standin.url}/compute/v2.1/servers/detail?marker=a222a93e"
    standin.answer("/compute/v2.1/servers/detail", {"servers": [NOVA_SERVER], "servers_links": [
        {"rel": "next", "href": next_servers}]})  # fmt: skip
    standin.answer("/compute/v2.1/servers/detail?marker=a222a93e", {"servers": [second, {**second, "id": "gone",
        "status": "DELETED"}]})  # fmt: skip
    standin.answer("/volume/v3/volumes/detail", {"volumes": [
        {"id": "v1", "name": "gpu-rent-boot", "status": "in-use", "size": 10, "availability_zone": "ru-7a",
         "metadata": {"gpu-rent": "boot"}},
        {"id": "v9", "name": "someone-elses", "status": "available", "size": 1, "availability_zone": "ru-7a",
         "metadata": {}},
    ]})  # fmt: skip
    standin.answer("/network/v2.0/floatingips", {"floatingips": [
        {"id": "f1", "floating_ip_address": "10.231.7.21", "port_id": "p1", "fixed_ip_address": "192.168.77.5",
         "description": "gpu-rent gpu-rent"}],
        "links": [{"rel": "next", "href": "/v2.0/floatingips?marker=f1"}]})  # fmt: skip
    unattached = {"id": "f2", "floating_ip_address": "10.231.7.22", "port_id": None, "description": ""}
    standin.answer("/network/v2.0/floatingips?marker=f1", {"floatingips": [unattached], "links": []})
    standin.answer("/volume/v3/snapshots", {"snapshots": [{"id": "n1", "name": "gpu-rent-boot-ok"}]})


def test_the_four_lists_page_after_page_become_the_view(standin):
    a_cloud(standin)
    view = cloud_http.observe(route_to(standin), "gpu-rent")
    assert view is not None
    assert [(s.id, s.status, s.addresses) for s in view.servers] == [
        ("a222a93e", "ACTIVE", ("10.231.7.21",)),
        ("s2", "SHUTOFF", ("10.231.7.21",)),  # tagged gpu-rent, another name: kept (a leftover for status)
    ]
    assert view.volumes == (Volume("v1", "gpu-rent-boot", "in-use", 10, "ru-7a", "boot"),)
    assert view.floating_ips == (
        FloatingIP("f1", "10.231.7.21", "p1", "gpu-rent gpu-rent", "192.168.77.5"),
        FloatingIP("f2", "10.231.7.22", None, "", None),
    )
    assert view.snapshots == ("n1",)
    assert sorted(standin.paths()) == sorted(standin.answers)  # every page once, nothing else


def test_each_request_carries_the_token_and_the_microversion_the_sdk_sent(standin):
    a_cloud(standin)
    cloud_http.observe(route_to(standin), "gpu-rent")
    # header names are case-insensitive (urllib writes them capitalized): compared in lower case
    sent = {path.split("?")[0]: {k.lower(): v for k, v in headers.items()} for path, headers in standin.requests}
    assert {h["x-auth-token"] for h in sent.values()} == {TOKEN}
    assert {h["accept"] for h in sent.values()} == {"application/json"}
    assert sent["/compute/v2.1/servers/detail"]["openstack-api-version"] == "compute 2.100"
    assert sent["/compute/v2.1/servers/detail"]["x-openstack-nova-api-version"] == "2.100"
    assert sent["/volume/v3/volumes/detail"]["openstack-api-version"] == "volume 3.71"
    assert sent["/volume/v3/snapshots"]["openstack-api-version"] == "volume 3.65"
    assert "openstack-api-version" not in sent["/network/v2.0/floatingips"]


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        ("/compute/v2.1/servers/detail", (401, {"error": {"code": 401, "message": "requires authentication"}})),
        ("/volume/v3/volumes/detail", (406, {"computeFault": {"message": "Version 3.71 is not supported"}})),
        ("/network/v2.0/floatingips", (503, {"NeutronError": "unavailable"})),
        ("/volume/v3/snapshots", (200, b"<html>a proxy's page</html>")),
        ("/volume/v3/snapshots", (200, {"snapshot": []})),  # not the list the SDK reads
        ("/compute/v2.1/servers/detail", (200, {"servers": [{"id": "x", "name": "gpu-rent"}]})),  # no status
    ],
)  # fmt: skip
def test_any_refusal_error_or_unexpected_body_is_none(standin, path, answer):
    a_cloud(standin)
    standin.answer(path, *answer)
    assert cloud_http.observe(route_to(standin), "gpu-rent") is None


def test_the_token_never_follows_a_redirect_or_a_link_to_another_host(standin):
    elsewhere = StandIn()
    try:
        a_cloud(standin)
        standin.answer("/volume/v3/snapshots", {}, 302, {"Location": f"{elsewhere.url}/volume/v3/snapshots"})
        assert cloud_http.observe(route_to(standin), "gpu-rent") is None
        a_cloud(standin)
        away = [{"rel": "next", "href": f"{elsewhere.url}/network/v2.0/floatingips?marker=f1"}]
        page = {"floatingips": [{"id": "f1", "floating_ip_address": "a"}], "floatingips_links": away}
        standin.answer("/network/v2.0/floatingips", page)
        assert cloud_http.observe(route_to(standin), "gpu-rent") is None
        assert elsewhere.requests == []
    finally:
        elsewhere.server.shutdown()
        elsewhere.server.server_close()


def test_a_cloud_that_does_not_answer_is_none():
    dead = Route({name: Call("http://127.0.0.1:9/v1", "/x", {}, "x", {}) for name in cloud_route.CALLS}, TOKEN,
                 time.time() + 3600, True, None, "dead", HERE)  # fmt: skip
    assert cloud_http.observe(dead, "gpu-rent") is None


# ---------------------------------------------------------------------------------------------- gpu-rent status


def status(project: Path) -> subprocess.CompletedProcess:
    """gpu-rent status --json in a fresh python, its imports logged (-X importtime)."""
    argv = [sys.executable, "-X", "importtime", "-m", "gpu_rent", "status", "--json", "-p", str(project)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def keep_route(project: Path, route: Route) -> None:
    auth = config.load(project).cloud
    (project / ".gpu-rent").mkdir(exist_ok=True)
    cloud_route.write(route, auth, cloud_route.candidate_files(auth), project / ".gpu-rent" / cloud_route.FILE)


def test_status_along_a_kept_route_loads_no_sdk_and_says_what_the_cloud_has(dead_cloud_project, standin):
    a_cloud(standin)
    keep_route(dead_cloud_project, route_to(standin))
    result = status(dead_cloud_project)
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout)
    assert said["cloud"] == 'cloud "test" (stand-in), project p'
    assert said["server"]["id"] == "a222a93e" and said["floating_ip"] == "10.231.7.21"
    assert [x["id"] for x in said["leftovers"]] == ["s2", "f2"]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "gpu_rent" in imported and not imported & {"openstack", "keystoneauth1", "requests"}


def test_status_with_a_route_at_its_end_goes_through_the_sdk_and_says_it_as_before(dead_cloud_project, standin):
    a_cloud(standin)
    keep_route(dead_cloud_project, route_to(standin, expires_in=60))
    result = status(dead_cloud_project)
    assert result.returncode == 4 and standin.requests == []
    lines = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert len(lines) == 1 and lines[0].startswith('error: cannot reach the cloud (cloud "test"'), result.stderr


def test_a_proxy_in_the_environment_is_passed_by_when_the_route_goes_straight(standin, monkeypatch):
    """requests chose no proxy for the endpoint (e.g. no_proxy=10.0.0.0/8, which urllib cannot read): neither
    does the plain read, whatever urllib would take from the environment."""
    a_cloud(standin)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens: taken, the read would fail
    monkeypatch.setenv("no_proxy", "10.0.0.0/8")
    assert cloud_http.observe(route_to(standin), "gpu-rent") is not None


def test_the_proxy_requests_chose_carries_the_read(standin):
    """The endpoint's name never resolves: only the proxy (the stand-in) can answer for it."""
    cloud = "http://cloud.invalid:8774"
    for path in ("/compute/v2.1/servers/detail", "/volume/v3/volumes/detail", "/network/v2.0/floatingips",
                 "/volume/v3/snapshots"):  # fmt: skip
        key = path.split("/")[-1] if not path.endswith("detail") else path.split("/")[-2]
        standin.answer(cloud + path, {"floatingips" if key == "floatingips" else key: []})
    view = cloud_http.observe(route_to(standin, url=cloud, proxies={"http": standin.url}), "gpu-rent")
    assert view is not None and view.servers == () and view.floating_ips == ()
    assert standin.paths()[0].startswith(cloud) and all(h.get("X-Auth-Token") == TOKEN for _, h in standin.requests)
