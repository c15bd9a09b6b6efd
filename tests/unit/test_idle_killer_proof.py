"""How the idle-killer reads the proof of its credential: a GET of its own server through the endpoint,
region and path its DELETE uses, against a loopback Keystone and Nova answering each way the real ones
can (the real ones, with an access rule Nova does and does not match, in tests/ground/test_idle_killer.py).

Keystone gives an access-ruled application credential a token whatever its rules say; Nova's
keystonemiddleware matches the rule against the path Nova sees and answers 401 when none matches
(or when Nova checks no access rules at all), 403 when the cloud's policy forbids the call, 404 when the
server is not in that region. Each is a refusal in words that name the likely cause; a 5xx or no
answer is a hiccup tried again; and a VM that is not the server its config names never acts.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_rent.on_vm import idle_killer
from gpu_rent.on_vm.idle_killer import Config

SERVER = "11111111-2222-3333-4444-555555555555"
CUT = "cut"  # an answer whose body stops mid-way (http.client's IncompleteRead, not an OSError)
GARBLED = "garbled"  # no HTTP status line at all (http.client's BadStatusLine, not an OSError)
# Nova's 404 about a server (nova/api/openstack/common.py get_instance: InstanceNotFound's text)
NOVA_NOT_FOUND = {"itemNotFound": {"code": 404, "message": f"Instance {SERVER} could not be found."}}


class Cloud:
    """Keystone's POST /v3/auth/tokens with a catalogue, and Nova behind a gateway at /compute/v2.1."""

    def __init__(self, nova: tuple[int, dict], regions: tuple[str, ...] = ("ru-7",), network: str = "/network"):
        self.nova = nova
        # each service's answer to a DELETE, by the first part of the path ("compute", "network"), or CUT, GARBLED
        self.deletes: dict[str, tuple[int, dict | str] | str] = {}
        self.asked: list[tuple[str, str]] = []
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict | str, headers: dict | None = None) -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, answer) -> None:
                if answer == CUT:
                    self.send_response(200)
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    self.wfile.write(b'{"server": ')
                    self.close_connection = True
                    return
                if answer == GARBLED:
                    self.wfile.write(b"NOT HTTP\r\n\r\n")
                    self.close_connection = True
                    return
                self._send(*answer)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                cloud.asked.append(("POST", self.path))
                catalog = [
                    {"type": kind, "endpoints": [{"interface": "public", "region_id": r, "url": f"{cloud.url}{path}"}
                                                 for r in regions]}
                    for kind, path in (("compute", "/compute/v2.1"), ("network", network))
                ]  # fmt: skip
                self._send(201, {"token": {"catalog": catalog}}, {"X-Subject-Token": "tok"})  # fmt: skip

            def do_GET(self):
                cloud.asked.append(("GET", self.path))
                self._answer(cloud.nova)

            def do_DELETE(self):
                cloud.asked.append(("DELETE", self.path))
                self._answer(cloud.deletes.get(self.path.split("/")[1], (204, "")))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def config(tmp_path: Path, cloud: Cloud, **kw) -> Config:
    data = {"server_id": SERVER, "auth_url": f"{cloud.url}/v3", "credential_id": "c", "credential_secret": "s",
            "region_name": "ru-7", "instance_data_file": str(tmp_path / "instance-data.json"),
            "status_file": str(tmp_path / "status.json"), "memory_file": str(tmp_path / "lib" / "memory.json"),
            "last_words_file": str(tmp_path / "lib" / "last-words.json")} | kw  # fmt: skip
    path = tmp_path / "idle-killer.json"
    path.write_text(json.dumps(data))
    return Config.load(path)


@pytest.fixture
def cloud_answering(monkeypatch):
    monkeypatch.setattr(idle_killer, "RETRY_PAUSE", 0.0)
    made: list[Cloud] = []

    def make(code: int, body: dict, regions: tuple[str, ...] = ("ru-7",), network: str = "/network") -> Cloud:
        made.append(Cloud((code, body), regions, network))
        return made[-1]

    yield make
    for cloud in made:
        cloud.close()


def test_the_proof_is_a_get_of_its_own_server_at_the_path_the_delete_uses(tmp_path, cloud_answering):
    cloud = cloud_answering(200, {"server": {"id": SERVER, "status": "ACTIVE"}})
    result = idle_killer.check_and_record(config(tmp_path, cloud))
    assert result["state"] == "ok" and result["proof"] == f"GET /compute/v2.1/servers/{SERVER} answered by Nova"
    assert cloud.asked == [("POST", "/v3/auth/tokens"), ("GET", f"/compute/v2.1/servers/{SERVER}")]
    assert json.loads((tmp_path / "status.json").read_text())["credential"]["state"] == "ok"


@pytest.mark.parametrize(
    ("code", "body", "cause"),
    [
        (401, {}, "its access rule does not match the path Nova sees (a gateway before Nova? set idle_killer_rule"),
        (403, {}, "the cloud's policy forbids GET /compute/v2.1/servers/"),
        (404, NOVA_NOT_FOUND, f"Nova in ru-7 has no server {SERVER} (the wrong region?)"),
        (404, "<html>404 Not Found</html>", "not the service's answer, the catalogue's URL may be wrong (<html>"),
        (200, {"server": {"id": "another"}}, "answered GET /compute/v2.1/servers/"),
    ],
    ids=["rule-path", "policy", "region", "wrong-url", "another-server"],
)  # fmt: skip
def test_a_refused_proof_names_its_likely_cause(tmp_path, cloud_answering, code, body, cause):
    result = idle_killer.check_and_record(config(tmp_path, cloud_answering(code, body)))
    assert result["state"] == "refused" and cause in result["message"], result


def test_no_region_in_a_catalogue_of_several_is_a_refusal_never_a_guess(tmp_path, cloud_answering):
    cloud = cloud_answering(200, {"server": {"id": SERVER}}, regions=("ru-3", "ru-7"))
    result = idle_killer.check_and_record(config(tmp_path, cloud, region_name=None))
    assert result["state"] == "refused" and "no region is set (OS_REGION_NAME in .env)" in result["message"]
    assert ("GET", f"/compute/v2.1/servers/{SERVER}") not in cloud.asked


def test_a_nova_that_fails_is_unreachable_and_tried_again(tmp_path, cloud_answering):
    cloud = cloud_answering(503, {})
    result = idle_killer.check_and_record(config(tmp_path, cloud))
    assert result["state"] == "unreachable" and "503" in result["message"]
    assert cloud.asked.count(("GET", f"/compute/v2.1/servers/{SERVER}")) == 2  # the check's two tries


def test_a_vm_that_is_another_server_never_uses_the_credential(tmp_path, cloud_answering):
    """A kept boot volume under a new server, before up arms it: the old config names the VM before."""
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    new = "99999999-8888-7777-6666-555555555555"
    (tmp_path / "instance-data.json").write_text(json.dumps({"v1": {"instance_id": new}}))
    cfg = config(tmp_path, cloud, idle_seconds=0, grace_seconds=0)
    result = idle_killer.check_and_record(cfg)
    assert result["state"] == "refused" and f"this VM is server {new}" in result["message"]
    credential: dict = {}
    acted = idle_killer.delete_self(cfg, credential, 0.0, print, "idle")
    assert acted["acted"].startswith(f"CREDENTIAL REFUSED, not deleted: this VM is server {new}")
    assert cloud.asked == [] and not Path(cfg.last_words_file).exists()  # nothing asked, nothing written


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"v1": null}', '{"v1": {"instance_id": ""}}', '{"v1": {"instance_id": "i-0000abcd"}}'],
    ids=["empty", "torn", "list", "null", "blank", "ec2-datasource"],
)
def test_cloud_inits_record_unreadable_trusts_the_config(tmp_path, cloud_answering, text):
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    (tmp_path / "instance-data.json").write_text(text)
    cfg = config(tmp_path, cloud)
    assert idle_killer.own_instance_id(cfg) is None and idle_killer.not_this_server(cfg) is None
    (tmp_path / "instance-data.json").write_text(json.dumps({"v1": {"instance_id": SERVER}}))
    assert idle_killer.own_instance_id(cfg) == SERVER and idle_killer.check_and_record(cfg)["state"] == "ok"


def test_the_delete_is_in_the_last_words_before_the_address_is_tried(tmp_path, cloud_answering, monkeypatch):
    """Nova destroys the guest moments after it took the DELETE: a guest cut off while its floating IP is deleted
    has said already that its killer asked Nova to delete it (status and the next up read those words)."""
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cfg = config(tmp_path, cloud, floating_ip_id="f-1")
    said_before_the_address = []

    def cut_off(*_args):
        said_before_the_address.append(json.loads(Path(cfg.last_words_file).read_text()))
        raise SystemExit("the guest is gone")

    monkeypatch.setattr(idle_killer, "delete_floating_ip", cut_off)
    with pytest.raises(SystemExit):
        idle_killer.delete_self(cfg, {}, 0.0, print, "idle")
    assert said_before_the_address[0]["acted"] == f"asked Nova to delete server {SERVER}"
    assert ("DELETE", f"/compute/v2.1/servers/{SERVER}") in cloud.asked


def test_a_later_tick_asking_again_keeps_the_first_delete_in_the_last_words(tmp_path, cloud_answering):
    """Nova takes a while to end a server it took the DELETE of; the next tick (or the last breath) asks again and
    may be cut off mid-way: the words of the DELETE taken first stay, never overwritten by a second 'deleting'."""
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cfg = config(tmp_path, cloud, floating_ip_id="f-1")
    first = idle_killer.delete_self(cfg, {}, 100.0, print, "idle for 30 min")
    kept = json.loads(Path(cfg.last_words_file).read_text())
    assert kept["acted"] == first["acted"] and kept["reason"] == "idle for 30 min" and kept["at"] == 100.0
    again = idle_killer.delete_self(cfg, {}, 102.0, print, "idle for 30 min")
    assert again["acted"].startswith(f"asked Nova to delete server {SERVER}")
    assert json.loads(Path(cfg.last_words_file).read_text()) == kept
    assert cloud.asked.count(("DELETE", f"/compute/v2.1/servers/{SERVER}")) == 2  # asked again all the same
