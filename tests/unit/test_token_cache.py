"""The kept token: used again only by the very same login, only while it has life left, never readable by others."""

import json
import stat
from datetime import UTC, datetime, timedelta

from keystoneauth1.identity import v3

from gpu_rent.cloud import token_cache
from gpu_rent.project.state import TOKEN_FILE

LOGIN = {"auth_url": "http://127.0.0.1:5000/v3", "username": "u", "password": "hunter2-secret", "project_name": "p"}


def plugin():
    return v3.Password(**{k: v for k, v in LOGIN.items()}, user_domain_name="Default", project_domain_name="Default")


def logged_in(hours: float):
    p = plugin()
    expires = (datetime.now(UTC) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    body = {"token": {"expires_at": expires, "issued_at": "2026-11-30T00:00:00.000000Z", "methods": ["password"]}}
    p.set_auth_state(json.dumps({"auth_token": "tok-123", "body": body}))
    return p


def test_the_same_login_gets_the_kept_token_and_the_file_holds_no_password(tmp_path):
    path = tmp_path / TOKEN_FILE
    token_cache.keep(logged_in(2), path, LOGIN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "hunter2-secret" not in path.read_text()
    fresh = plugin()
    assert token_cache.restore(fresh, path, LOGIN) is not None
    assert fresh.auth_ref.auth_token == "tok-123"


def test_another_login_or_a_changed_password_logs_in_anew(tmp_path):
    path = tmp_path / TOKEN_FILE
    token_cache.keep(logged_in(2), path, LOGIN)
    for other in ({**LOGIN, "password": "changed"}, {**LOGIN, "project_name": "q"}):
        fresh = plugin()
        assert token_cache.restore(fresh, path, other) is None
        assert fresh.auth_ref is None


def test_a_token_near_its_end_or_a_broken_file_is_not_used(tmp_path):
    path = tmp_path / TOKEN_FILE
    token_cache.keep(logged_in(0.25), path, LOGIN)  # 15 minutes left: under the 20 a command may get
    fresh = plugin()
    assert token_cache.restore(fresh, path, LOGIN) is None and fresh.auth_ref is None
    path.write_text("{not json")
    assert token_cache.restore(plugin(), path, LOGIN) is None
    assert token_cache.restore(plugin(), tmp_path / "missing.json", LOGIN) is None


def test_no_folder_is_made_for_it(tmp_path):
    token_cache.keep(logged_in(2), tmp_path / ".gpu-rent" / TOKEN_FILE, LOGIN)
    assert not (tmp_path / ".gpu-rent").exists()  # doctor in a bare folder leaves it bare
