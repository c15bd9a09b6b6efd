"""How the idle-killer reads the answers to its DELETEs (money review #12), against a loopback Keystone, Nova
and Neutron answering each way the real ones, a gateway before them, or a cut connection can.

A 404 is "gone" only when it is the service's own word about the thing (its id in the body): a URL built wrong
answers 404 too while the server or address bills on. A 409 is "being deleted" only when Nova's own view of the
server says so. A connection cut mid-answer is a hiccup tried again, never a crash of the tick.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_rent.on_vm import idle_killer
from tests.unit.test_idle_killer_proof import CUT, GARBLED, NOVA_NOT_FOUND, SERVER, cloud_answering, config  # noqa: F401

ADDRESS = "f-1"
DELETE_SERVER = ("DELETE", f"/compute/v2.1/servers/{SERVER}")
DELETE_ADDRESS = ("DELETE", f"/network/v2.0/floatingips/{ADDRESS}")
# neutron_lib/exceptions/l3.py FloatingIPNotFound, as neutron/api/v2/resource.py sends it
NEUTRON_NOT_FOUND = {"NeutronError": {"type": "FloatingIPNotFound", "detail": "",
                                      "message": f"Floating IP {ADDRESS} could not be found"}}  # fmt: skip
GATEWAY_404 = "<html><body><h1>404 Not Found</h1></body></html>"
# Apache's page quotes the URL, the id in it: still not Nova's word
APACHE_404 = ("<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\"><html><head><title>404 Not Found</title>"
              f"</head><body><h1>Not Found</h1><p>The requested URL /compute/v2.1/servers/{SERVER} was not found on "
              "this server.</p></body></html>")  # fmt: skip
# what the ground's Neutron answers a DELETE of /v2.0/v2.0/floatingips/<id> (a URL built wrong)
NEUTRON_NO_ROUTE = {"NeutronError": {"type": "HTTPNotFound", "message": "The resource could not be found.",
                                     "detail": ""}}  # fmt: skip
# nova/exception.py InstanceInvalidState: its text names the delete whatever the state
CONFLICT = {"conflictingRequest": {"code": 409, "message": f"Cannot 'delete' instance {SERVER} while it is in "
                                                          "vm_state building"}}  # fmt: skip


def act(tmp_path: Path, cloud) -> tuple[dict, dict]:
    credential: dict = {}
    acted = idle_killer.delete_self(config(tmp_path, cloud, floating_ip_id=ADDRESS), credential, 0.0, print, "idle")
    return acted, credential


def words(tmp_path: Path) -> dict | None:
    path = tmp_path / "lib" / "last-words.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_nova_saying_the_server_is_not_found_is_gone_and_the_address_goes(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cloud.deletes["compute"] = (404, NOVA_NOT_FOUND)
    acted, _ = act(tmp_path, cloud)
    assert acted["acted"] == f"server {SERVER} is already gone; deleted floating IP {ADDRESS}"
    assert DELETE_ADDRESS in cloud.asked and words(tmp_path)["deleted_at"]


@pytest.mark.parametrize("page", [GATEWAY_404, APACHE_404], ids=["gateway", "apache-quoting-the-url"])
def test_a_404_not_about_the_server_is_never_gone(tmp_path, cloud_answering, page):  # noqa: F811
    """A gateway's 404 (a compute URL that reaches no Nova): the server bills on, the killer says so."""
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cloud.deletes["compute"] = (404, page)
    acted, credential = act(tmp_path, cloud)
    assert acted["acted"].startswith("CREDENTIAL REFUSED, cannot delete this server: Nova's DELETE answered HTTP 404")
    assert "the catalogue's URL may be wrong (<" in acted["acted"]
    assert credential["state"] == "refused" and DELETE_ADDRESS not in cloud.asked and words(tmp_path) is None


@pytest.mark.parametrize(
    ("shown", "acted"),
    [
        ((200, {"server": {"id": SERVER, "status": "ACTIVE", "OS-EXT-STS:task_state": "deleting"}}),
         f"server {SERVER} is being deleted already; deleted floating IP {ADDRESS}"),
        ((404, NOVA_NOT_FOUND), f"server {SERVER} is already gone; deleted floating IP {ADDRESS}"),
    ],
    ids=["deleting", "gone"],
)  # fmt: skip
def test_a_409_is_a_delete_under_way_only_when_nova_shows_it(tmp_path, cloud_answering, shown, acted):  # noqa: F811
    cloud = cloud_answering(*shown)
    cloud.deletes["compute"] = (409, CONFLICT)
    assert act(tmp_path, cloud)[0]["acted"] == acted
    assert ("GET", f"/compute/v2.1/servers/{SERVER}") in cloud.asked


def test_a_409_on_a_server_nova_shows_alive_is_tried_again_in_novas_words(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(200, {"server": {"id": SERVER, "status": "BUILD", "OS-EXT-STS:task_state": None}})
    cloud.deletes["compute"] = (409, CONFLICT)
    acted, credential = act(tmp_path, cloud)
    assert acted["acted"].startswith("delete failed, tried again next tick: Nova: HTTP 409 {")
    assert "while it is in vm_state building" in acted["acted"] and "state" not in credential
    assert cloud.asked.count(DELETE_SERVER) == 3 and DELETE_ADDRESS not in cloud.asked  # the tick's three tries
    assert words(tmp_path) is None  # the server stays: no words blaming the killer for a later stop


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ((404, NEUTRON_NOT_FOUND), f"floating IP {ADDRESS} is already gone"),
        ((404, NEUTRON_NO_ROUTE), "floating IP NOT deleted, it bills until `gpu-rent stop`: Neutron's DELETE answered "
                             "HTTP 404 not about this address: not the service's answer"),
    ],
    ids=["neutron-not-found", "no-such-route"],
)  # fmt: skip
def test_an_address_is_gone_only_on_neutrons_word(tmp_path, cloud_answering, answer, said):  # noqa: F811
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cloud.deletes["network"] = answer
    acted, _ = act(tmp_path, cloud)
    assert acted["floating_ip"].startswith(said), acted
    assert words(tmp_path)["acted"] == acted["acted"]


def test_a_network_endpoint_listed_with_its_version_is_not_given_it_twice(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(200, {"server": {"id": SERVER}}, network="/network/v2.0/")
    acted, _ = act(tmp_path, cloud)
    assert acted["floating_ip"] == f"deleted floating IP {ADDRESS}" and DELETE_ADDRESS in cloud.asked


@pytest.mark.parametrize("where", ["compute", "network"])
def test_an_answer_that_is_not_http_is_a_hiccup_not_a_crash(tmp_path, cloud_answering, where):  # noqa: F811
    cloud = cloud_answering(200, {"server": {"id": SERVER}})
    cloud.deletes[where] = GARBLED
    acted, _ = act(tmp_path, cloud)
    if where == "compute":
        assert acted["acted"].startswith("delete failed, tried again next tick: Nova at http://127.0.0.1:")
        assert "NOT HTTP" in acted["acted"] and words(tmp_path) is None
    else:
        assert acted["floating_ip"].startswith("floating IP NOT deleted, it bills until `gpu-rent stop`: Neutron at")


def test_a_proof_cut_mid_answer_is_unreachable(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(200, {})
    cloud.nova = CUT
    result = idle_killer.check_and_record(config(tmp_path, cloud))
    assert result["state"] == "unreachable" and "IncompleteRead" in result["message"], result


def test_a_409_whose_server_is_not_json_of_a_server_is_tried_again(tmp_path, cloud_answering):  # noqa: F811
    cloud = cloud_answering(200, ["not", "a", "server"])
    cloud.deletes["compute"] = (409, CONFLICT)
    acted, _ = act(tmp_path, cloud)
    assert acted["acted"].startswith("delete failed, tried again next tick: Nova at http://127.0.0.1:"), acted
    assert words(tmp_path) is None
