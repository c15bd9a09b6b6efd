"""The idle-killer's credential per server, as up names and hands it (plugins/module_utils/gpu_rent_killer_handoff.py);
made and handed against the real Keystone and Nova in tests/ground/test_rental.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
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


def _keystone(made_rules=None, fail: Exception | None = None):
    """Keystone and the catalogue as for_create meets them: the folder's last create credential is there."""
    calls: list[tuple] = []

    def create_application_credential(**kw):
        calls.append(("made", kw["name"], kw["expires_at"]))
        if fail:
            raise fail
        rules = kw["access_rules"] if made_rules is None else made_rules
        return SimpleNamespace(id="new", name=kw["name"], secret=kw["secret"], expires_at=kw["expires_at"],
                               access_rules=rules)  # fmt: skip

    conn = SimpleNamespace(
        current_project_id="a1b2c3d4e5f6",
        session=SimpleNamespace(get_user_id=lambda: "u", get_endpoint=lambda service_type, interface: {
            "compute": "http://127.0.0.1:8774/v2.1", "network": "http://127.0.0.1:9696"}[service_type]),
        identity=SimpleNamespace(
            find_application_credential=lambda user, name_or_id, ignore_missing: SimpleNamespace(id="old"),
            create_application_credential=create_application_credential,
            delete_application_credential=lambda user, cid: calls.append(("deleted", cid)),
        ),
    )  # fmt: skip
    return conn, calls


def test_the_create_carries_a_credential_for_any_server_of_the_path_and_the_address_taken_before():
    """Nova refuses a building server's metadata and its id is unknown before its answer: the create carries a
    credential whose rules end in `*` (one path segment, keystonemiddleware's _path_matches), a day long."""
    conn, calls = _keystone()
    metadata, said = handoff.for_create(conn, {"name": "lab-idle-killer"}, "ru-7", None, OTHER)
    folder = "lab-idle-killer-a1b2c3d4-ru-7"
    assert calls[0] == ("deleted", "old") and calls[1][:2] == ("made", f"{folder}-create")
    assert handoff.server_of(folder, f"{folder}-create") == handoff.CREATE_SUFFIX
    assert said["access_rules"] == [
        {"service": "compute", "method": "GET", "path": "/v2.1/servers/*"},
        {"service": "compute", "method": "DELETE", "path": "/v2.1/servers/*"},
        {"service": "network", "method": "DELETE", "path": f"/v2.0/floatingips/{OTHER}"},
    ]
    taken = vm_handoff.handed({"meta": metadata})  # the killer reads it as it reads the server's own
    assert taken.credential_id == "new" and taken.floating_ip_id == OTHER and taken.credential_secret
    assert taken.credential_secret not in json.dumps(said) and said["server_id"] == "*"
    expires = datetime.fromisoformat(calls[1][2]).replace(tzinfo=UTC)
    assert timedelta(hours=23) < expires - datetime.now(UTC) <= timedelta(days=1)
    # a gateway's rule path (idle_killer_rule_path) names a server: the create's ends in * in its place
    rules = handoff.access_rules(conn, None, handoff.ANY_SERVER, None, f"/compute/v2.1/servers/{SERVER}")
    assert [r["path"] for r in rules] == ["/compute/v2.1/servers/*"] * 2


def test_a_create_credential_keystone_refused_or_stripped_of_its_rules_is_said_and_none_is_carried():
    conn, calls = _keystone(made_rules=[])
    assert handoff.for_create(conn, {"name": "lab"}, None, None, None) == (
        {}, {"handed": False, "why": "Keystone did not keep the access rules"})  # fmt: skip
    assert calls[-1] == ("deleted", "new")  # never one that may do anything the user may
    conn, calls = _keystone(fail=RuntimeError("403 Forbidden: access rules are not allowed"))
    metadata, said = handoff.for_create(conn, {"name": "lab"}, None, None, None)
    assert metadata == {} and said == {"handed": False, "why": "403 Forbidden: access rules are not allowed"}


def test_the_creates_credential_goes_once_the_vm_proved_its_own_and_at_stop_never_before():
    """A make's prune keeps it (it may be all the killer holds until the arm proves the server's own); the arm's
    unhand forgets it; stop deletes every credential of the folder."""
    folder = "lab-idle-killer-a1b2c3d4-ru-7"
    names = [f"{folder}-create", f"{folder}-{SERVER}", f"{folder}-{OTHER}", "lab-2-idle-killer-a1b2c3d4-ru-7-create"]
    deleted: list[str] = []
    conn = SimpleNamespace(
        current_project_id="a1b2c3d4e5f6",
        session=SimpleNamespace(get_user_id=lambda: "u"),
        identity=SimpleNamespace(application_credentials=lambda user: [SimpleNamespace(id=n, name=n) for n in names],
                                 find_application_credential=lambda user, name_or_id, ignore_missing: next(
                                     (SimpleNamespace(id=n) for n in names if n == name_or_id), None),
                                 delete_application_credential=lambda user, cid: deleted.append(cid)),
        compute=SimpleNamespace(find_server=lambda sid, ignore_missing: None),  # every server gone
    )  # fmt: skip
    assert handoff.prune(conn, folder, keep=SERVER) == [f"{folder}-{OTHER}"]
    assert handoff.forget_create(conn, "lab-idle-killer", "ru-7") and deleted[-1] == f"{folder}-create"
    assert not handoff.forget_create(conn, "lab-idle-killer", "ru-9")  # another region's folder: none of it
    assert handoff.prune(conn, folder, servers_gone_only=False) == [
        f"{folder}-create", f"{folder}-{SERVER}", f"{folder}-{OTHER}"]  # fmt: skip
