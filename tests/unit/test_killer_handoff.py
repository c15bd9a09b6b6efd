"""The idle-killer's credential per server, as up names and hands it (plugins/module_utils/gpu_rent_killer_handoff.py);
made and handed against the real Keystone and Nova in tests/ground/test_rental.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from gpu_rent.on_vm import handoff as vm_handoff
from tests.module_file import load

handoff = load(
    "gpu_rent_killer_handoff",
    Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "gpu_rent_killer_handoff.py",
)
SERVER = "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
OTHER = "11111111-2222-3333-4444-555555555555"


def test_each_server_has_its_own_credential_name_and_only_the_folders_are_its():
    conn = SimpleNamespace(current_project_id="a1b2c3d4e5f6")
    folder = handoff.folder_name(conn, "lab-idle-killer", "ru-7")
    assert folder == "lab-idle-killer-a1b2c3d4-ru-7"
    assert handoff.credential_name(conn, "lab-idle-killer", "ru-7", SERVER) == f"{folder}-{SERVER}"
    assert handoff.server_of(folder, f"{folder}-{SERVER}") == SERVER
    assert handoff.server_of(folder, folder) == ""  # the one per project before per-server credentials
    # another folder's (a NAME that begins the same), another region's, or not a server id: never the folder's
    for name in (f"lab-idle-killer-2-a1b2c3d4-ru-7-{SERVER}", f"lab-idle-killer-a1b2c3d4-ru-9-{SERVER}",
                 f"{folder}-{SERVER}-x", f"{folder}-not-a-server", f"{folder}x"):  # fmt: skip
        assert handoff.server_of(folder, name) is None, name


def test_the_handoff_fits_nova_metadata_and_the_killer_reads_it_back():
    """Nova keeps a metadata value of at most 255 characters; what the laptop writes is what the VM takes."""
    credential = SimpleNamespace(id="c" * 32, secret="s" * 43, expires_at="2026-12-13T20:11:44.000000")
    written = {}
    conn = SimpleNamespace(compute=SimpleNamespace(set_server_metadata=lambda server, **kw: written.update(kw)))
    handoff.hand(conn, SERVER, credential, OTHER)
    value = written[handoff.HANDOFF_KEY]
    assert len(value) <= 255, len(value)
    taken = vm_handoff.handed({"meta": written})
    assert (taken.credential_id, taken.credential_secret, taken.floating_ip_id) == ("c" * 32, "s" * 43, OTHER)
    assert taken.expires_at == "2026-12-13T20:11:44" and taken.handed_at > 1.7e9
    handoff.hand(conn, SERVER, credential, None)  # KEEP_FLOATING_IP: no address to delete
    assert json.loads(written[handoff.HANDOFF_KEY])["f"] is None
    assert vm_handoff.handed({"meta": written}).floating_ip_id is None


def test_what_a_module_returns_of_a_handed_credential_holds_no_secret():
    credential = SimpleNamespace(id="cid", name="n", secret="the-secret", expires_at="x", access_rules=[{"a": 1}])
    returned = handoff.said(credential, SERVER, OTHER, 0.1234)
    assert "the-secret" not in json.dumps(returned)
    assert returned["handed"] is True and returned["seconds"] == 0.123 and returned["floating_ip_id"] == OTHER


def test_no_module_result_carries_the_handed_secret():
    lookup = load("gpu_rent_lookup", Path(__file__).resolve().parents[2] / "plugins" / "module_utils" /
                  "gpu_rent_lookup.py")  # fmt: skip
    server = {"id": SERVER, "metadata": {"gpu-rent": "lab", handoff.HANDOFF_KEY: '{"k": "the-secret"}'}}
    assert "the-secret" not in json.dumps(lookup.without_handoff(server))
    assert (
        lookup.without_handoff(server)["metadata"] == {"gpu-rent": "lab"} and handoff.HANDOFF_KEY in server["metadata"]
    )
    made = SimpleNamespace(secret="the-secret")
    said = handoff.redacted(ValueError("Invalid input for field 'gpu_rent_killer': 'the-secret' is too long"), made)
    assert "the-secret" not in said and "********" in said


def test_a_make_deletes_only_the_folders_credentials_whose_server_is_gone():
    """Never another folder's, never the server kept, never the one per project from before (a VM of that
    version may hold it until its next arm; stop deletes it)."""
    folder = "lab-idle-killer-a1b2c3d4-ru-7"
    names = [f"{folder}-{SERVER}", f"{folder}-{OTHER}", folder, f"lab-idle-killer-2-a1b2c3d4-ru-7-{OTHER}"]
    deleted: list[str] = []
    conn = SimpleNamespace(
        session=SimpleNamespace(get_user_id=lambda: "u"),
        identity=SimpleNamespace(application_credentials=lambda user: [SimpleNamespace(id=n, name=n) for n in names],
                                 delete_application_credential=lambda user, cid: deleted.append(cid)),
        compute=SimpleNamespace(find_server=lambda sid, ignore_missing: None),  # every server gone
    )  # fmt: skip
    assert handoff.prune(conn, folder, keep=SERVER) == [f"{folder}-{OTHER}"] == deleted
    deleted.clear()
    assert handoff.prune(conn, folder, servers_gone_only=False) == [f"{folder}-{SERVER}", f"{folder}-{OTHER}", folder]
