"""The killer takes its server's identity and credential from the metadata service (on_vm/handoff.py), before
any SSH: a kept boot volume under a new server never acts on the old credential, and takes the one up handed
the new server as soon as it is there. A loopback metadata service answers here as Nova's does behind
Neutron's proxy (meta_data.json: uuid, meta); the real one, on the ground's hosts, in tests/ground.
"""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest

from gpu_rent.on_vm import handoff, idle_killer, paths
from gpu_rent.on_vm.idle_killer import Config
from tests.unit import test_idle_killer_proof as proof
from tests.unit.test_idle_killer_proof import SERVER, config

cloud_answering = proof.cloud_answering  # the loopback Keystone and Nova, as a fixture here too

NEW = "99999999-8888-7777-6666-555555555555"
FIP = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


class Metadata(proof.Cloud):
    """http://169.254.169.254/openstack/latest/meta_data.json as Nova answers one VM: the proof tests' loopback
    server, whose every GET answers one body; `asked` holds each request."""

    def __init__(self, uuid: str, meta: dict):
        super().__init__((200, {"uuid": uuid, "meta": meta, "name": "gpu-rent-vm"}))
        self.url = f"{self.url}/openstack/latest/meta_data.json"


def handed(credential: str = "new-cred", secret: str = "new-secret", fip: str | None = FIP) -> dict:
    return {paths.HANDOFF_KEY: json.dumps({"c": credential, "k": secret, "f": fip, "e": "2026-12-13T20:00:00",
                                           "t": 1_800_000_000})}  # fmt: skip


@pytest.fixture
def metadata():
    handoff.forget()
    made: list[Metadata] = []

    def make(uuid: str, meta: dict) -> Metadata:
        made.append(Metadata(uuid, meta))
        return made[-1]

    yield make
    handoff.forget()
    for service in made:
        service.close()


def test_a_kept_volume_under_a_new_server_takes_the_credential_handed_to_it(tmp_path, cloud_answering, metadata):
    cloud = cloud_answering(200, {"server": {"id": NEW, "status": "ACTIVE"}})
    service = metadata(NEW, handed())
    cfg = config(tmp_path, cloud, metadata_url=service.url, floating_ip_id="old-fip", armed_at=5.0,
                 billing_hour="rental", rental_started_at=4.0)  # fmt: skip
    path = tmp_path / "idle-killer.json"
    taken = idle_killer.take_handoff(path, cfg, 1_800_000_100.0)
    assert (taken.server_id, taken.credential_id, taken.credential_secret) == (NEW, "new-cred", "new-secret")
    assert taken.floating_ip_id == FIP and taken.credential_expires_at == "2026-12-13T20:00:00"
    assert taken.armed_at == 1_800_000_100.0  # a new arming: the boot's grace from now, no old memory
    assert taken.rental_started_at == 1_800_000_000  # BILLING_HOUR=rental counts from the handoff
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not list(path.parent.glob("*.partial"))
    assert idle_killer.check_and_record(taken)["state"] == "ok"  # its proof asks Nova for the new server
    assert cloud.asked[-1] == ("GET", f"/compute/v2.1/servers/{NEW}")
    # taken once: the next tick finds the config holding it and writes nothing
    before = path.stat().st_mtime_ns
    assert idle_killer.take_handoff(path, taken, 1_800_000_200.0) == taken and path.stat().st_mtime_ns == before


def test_a_new_server_without_its_credential_yet_never_acts_on_the_old_one(tmp_path, cloud_answering, metadata):
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    service = metadata(NEW, {})
    cfg = config(tmp_path, cloud, metadata_url=service.url)
    text = (tmp_path / "idle-killer.json").read_text()
    assert idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 100.0) == cfg
    assert (tmp_path / "idle-killer.json").read_text() == text
    result = idle_killer.check_and_record(cfg)
    assert (
        result["state"] == "refused"
        and f"this VM is server {NEW} but the killer is armed for {SERVER}" in (result["message"])
    )
    acted = idle_killer.delete_self(cfg, {}, 0.0, print, "idle")
    assert acted["acted"].startswith("CREDENTIAL REFUSED, not deleted") and cloud.asked == []


def test_the_same_server_handed_a_new_credential_keeps_its_arming(tmp_path, cloud_answering, metadata):
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    service = metadata(SERVER, handed(credential="remade", secret="s2", fip=None))  # handed at 1.8e9
    cfg = config(tmp_path, cloud, metadata_url=service.url, armed_at=50.0, floating_ip_id=FIP)
    taken = idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 100.0)
    assert (taken.server_id, taken.credential_id, taken.armed_at) == (SERVER, "remade", 50.0)
    assert taken.floating_ip_id is None  # handed without one (KEEP_FLOATING_IP): the address is not its to delete


def test_another_credential_for_the_same_server_is_taken_only_once_nova_proves_it(tmp_path, cloud_answering,
                                                                                  metadata):  # fmt: skip
    """The metadata's credential may be older than the config's (the arm wrote one made over SSH; the laptop's
    clock is not the VM's): refused by Nova, it is not taken and the config keeps what the arm wrote."""
    cloud = cloud_answering(401, {})
    service = metadata(SERVER, handed(credential="older"))
    cfg = config(tmp_path, cloud, metadata_url=service.url, armed_at=1_800_000_050.0)
    text = (tmp_path / "idle-killer.json").read_text()
    assert idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 1_800_000_100.0) == cfg
    assert (tmp_path / "idle-killer.json").read_text() == text
    assert cloud.asked == [("POST", "/v3/auth/tokens"), ("GET", f"/compute/v2.1/servers/{SERVER}")]


def test_a_config_holding_the_handed_id_without_its_secret_takes_the_secret(tmp_path, cloud_answering, metadata):
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    service = metadata(SERVER, handed(credential="c"))
    cfg = config(tmp_path, cloud, metadata_url=service.url, credential_secret=None)
    assert idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 100.0).credential_secret == "new-secret"


def test_an_arm_whose_handed_secret_the_vm_cannot_read_is_refused_in_words(tmp_path, capsys):
    """A cloud without a metadata service: the arm says so and how to send the credential over SSH instead."""
    handoff.forget()
    sent = {"server_id": SERVER, "auth_url": "http://127.0.0.1:9/v3", "credential_id": "handed-id",
            "credential_secret": None, "metadata_url": "http://127.0.0.1:9/openstack/latest/meta_data.json",
            "status_file": str(tmp_path / "status.json"), "memory_file": "", "last_words_file": ""}  # fmt: skip
    assert idle_killer.arm(tmp_path / "cfg" / "idle-killer.json", json.dumps(sent), None) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["credential_state"] == "refused" and not said["credential_ok"]
    assert "could not read it from http://127.0.0.1:9/" in said["credential"]
    assert "set idle_killer_metadata_url to ''" in said["credential"]
    handoff.forget()


@pytest.mark.parametrize(
    "value",
    ["", "{", "[]", '{"c": "x"}', '{"k": "y"}', '{"c": "", "k": "y"}', '{"c": "x", "k": "y", "t": "soon"}'],
    ids=["empty", "torn", "list", "no-secret", "no-id", "blank-id", "bad-time"],
)
def test_a_handoff_not_the_laptops_is_not_taken(tmp_path, cloud_answering, metadata, value):
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    service = metadata(NEW, {paths.HANDOFF_KEY: value})
    cfg = config(tmp_path, cloud, metadata_url=service.url)
    assert idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 100.0) == cfg


def test_without_a_metadata_service_cloud_inits_record_decides(tmp_path, cloud_answering):
    handoff.forget()
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    # port 9 (discard) on loopback: nothing answers, at once
    cfg = config(tmp_path, cloud, metadata_url="http://127.0.0.1:9/openstack/latest/meta_data.json")
    assert idle_killer.own_instance_id(cfg) is None and idle_killer.not_this_server(cfg) is None
    (tmp_path / "instance-data.json").write_text(json.dumps({"v1": {"instance_id": NEW}}))
    assert idle_killer.own_instance_id(cfg) == NEW and idle_killer.not_this_server(cfg)
    assert idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 1.0) == cfg  # nothing handed to take
    handoff.forget()


def test_the_arm_fills_the_secret_up_handed_from_the_held_config_or_the_metadata(tmp_path, metadata):
    service = metadata(NEW, handed(credential="handed-id", secret="handed-secret"))
    path = tmp_path / "idle-killer.json"
    sent = {"server_id": NEW, "auth_url": "http://127.0.0.1:9/v3", "credential_id": "handed-id",
            "credential_secret": None, "metadata_url": service.url}  # fmt: skip
    # nothing held yet: the metadata gives it
    assert json.loads(idle_killer.filled(json.dumps(sent), path))["credential_secret"] == "handed-secret"
    # held already (the killer took it at its first tick): the VM's own copy, the metadata not asked
    path.write_text(json.dumps({**sent, "credential_secret": "held-secret"}))
    asked = len(service.asked)
    assert json.loads(idle_killer.filled(json.dumps(sent), path))["credential_secret"] == "held-secret"
    assert len(service.asked) == asked
    # another credential than the one handed and held: left empty, and the proof refuses it in words
    other = json.dumps({**sent, "credential_id": "other"})
    assert idle_killer.filled(other, path) == other
    # the same content gives the same text, so a re-arm leaves the file (and its arming) alone
    assert idle_killer.filled(json.dumps(sent), path) == idle_killer.filled(json.dumps(sent), path)


def test_a_config_without_a_metadata_url_never_asks_one(tmp_path, cloud_answering, monkeypatch):
    """Configs armed before the handoff, and the tests' own: no link-local address is ever asked for them."""
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cfg = config(tmp_path, cloud)
    assert cfg.metadata_url == ""

    def refuse(*args, **kwargs):
        raise AssertionError("the metadata service was asked")

    monkeypatch.setattr(handoff.urllib.request, "urlopen", refuse)
    assert handoff.read_metadata(cfg.metadata_url) is None
    assert idle_killer.take_handoff(Path(tmp_path / "idle-killer.json"), cfg, 1.0) == cfg
    assert isinstance(Config.load(tmp_path / "idle-killer.json"), Config)


def test_the_first_boots_config_is_written_root_only_and_never_over_a_config_there(tmp_path, monkeypatch, capsys):
    """cloud-init's installer writes it at a first boot from the image (idle_killer first-boot); the arm may have
    written its own first (cloud-init's final stage runs once sshd is up), which stays."""
    path = tmp_path / "gpu-rent" / "idle-killer.json"
    first = json.dumps({"server_id": "", "auth_url": "http://127.0.0.1:9/v3", "credential_id": None,
                        "credential_secret": None, "swarmui_url": ""}) + "\n"  # fmt: skip
    monkeypatch.setattr("sys.stdin", io.StringIO(first))
    assert idle_killer.main(["first-boot", "--config", str(path)]) == 0
    assert path.read_text() == first and Config.load(path).server_id == ""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    armed = json.dumps({"server_id": SERVER, "auth_url": "http://127.0.0.1:9/v3", "credential_id": "c",
                        "credential_secret": "s"})  # fmt: skip
    path.write_text(armed)
    assert idle_killer.first_boot(path, first) == 0 and path.read_text() == armed
    assert "kept: the arm wrote it first" in capsys.readouterr().err
    # one the tick could not load is refused in words, and nothing is left behind
    assert idle_killer.first_boot(tmp_path / "other" / "idle-killer.json", "{not json") == 2
    assert "cannot delete itself" in capsys.readouterr().err and list((tmp_path / "other").iterdir()) == [
        tmp_path / "other" / "idle-killer.json.lock"
    ]


def test_a_first_boots_config_never_acts_before_it_is_handed_a_credential(tmp_path, cloud_answering, metadata):
    cloud = cloud_answering(200, {"server": {"id": NEW}})
    service = metadata(NEW, {})
    cfg = config(tmp_path, cloud, metadata_url=service.url, server_id="", credential_id=None, credential_secret=None)
    assert idle_killer.take_handoff(tmp_path / "idle-killer.json", cfg, 100.0) == cfg
    result = idle_killer.check_and_record(cfg)
    assert result["state"] == "refused"
    assert result["message"].startswith(f"this VM is server {NEW} but the killer is installed at its first boot,")
    assert idle_killer.delete_self(cfg, {}, 0.0, print, "idle")["acted"].startswith("CREDENTIAL REFUSED, not deleted")
    assert cloud.asked == []
