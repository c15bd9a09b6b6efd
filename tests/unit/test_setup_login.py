"""Whether setup lets an application credential through: `up` makes the idle-killer's credential with it, which
Keystone allows only to an unrestricted one. Decided on a fake connection, as keystoneauth and openstacksdk show it."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from keystoneauth1.exceptions import ConnectFailure
from openstack.exceptions import ForbiddenException
from typer.testing import CliRunner

from gpu_rent.cli.app import app
from gpu_rent.project.errors import ConfigError
from gpu_rent.setup import login as setup_login

URL = "http://127.0.0.1:9/v3"
SECRET = "s3cret-app-secret"
FIX = (
    "gpu-rent up makes a credential for the VM's idle-killer, which Keystone allows only to one made with "
    "`openstack application credential create --unrestricted`"
)


class Keystone:
    """A logged-in connection: its token (the credential it used, None for a password) and what Keystone answers
    when asked for the credential (an exception is raised); the credentials asked for, as (user, id)."""

    def __init__(self, credential=None, restricted=None, shown=None):
        used = None if credential is None else {"id": credential, "name": "n", "restricted": restricted}
        access = SimpleNamespace(application_credential_id=credential, application_credential=used, user_id="user-1")
        self.session = SimpleNamespace(auth=SimpleNamespace(get_access=lambda session: access))
        self.identity = SimpleNamespace(get_application_credential=self._show)
        self.shown, self.asked, self.closed = shown, [], False

    def _show(self, user, application_credential):
        self.asked.append((user, application_credential))
        if isinstance(self.shown, Exception):
            raise self.shown
        return self.shown

    def close(self):
        self.closed = True


def check(conn: Keystone) -> list[str]:
    warnings = []
    setup_login.check_credential(conn, warnings.append)
    return warnings


def test_a_password_login_is_not_asked_about():
    conn = Keystone(shown=AssertionError("not asked"))
    assert check(conn) == [] and conn.asked == []


def test_the_token_says_restricted_refused_naming_the_fix():
    with pytest.raises(ConfigError) as refused:
        check(Keystone("cred-1", restricted=True))
    assert refused.value.message == (
        f"the application credential cred-1 is restricted: {FIX}; make one so, or log in with a password"
    )


def test_the_token_says_unrestricted_through_without_asking():
    conn = Keystone("cred-1", restricted=False)
    assert check(conn) == [] and conn.asked == []


@pytest.mark.parametrize(("unrestricted", "refused"), [(False, True), (True, False)])
def test_a_token_without_it_the_credential_as_keystone_shows_it_decides(unrestricted, refused):
    conn = Keystone("cred-1", shown=SimpleNamespace(unrestricted=unrestricted))
    if refused:
        with pytest.raises(ConfigError, match="cred-1 is restricted"):
            check(conn)
    else:
        assert check(conn) == []
    assert conn.asked == [("user-1", "cred-1")]


@pytest.mark.parametrize(
    ("shown", "why"),
    [
        (ForbiddenException("HTTP 403: You are not authorized\n to perform the requested action"),
         "HTTP 403: You are not authorized to perform the requested action"),
        (ConnectFailure("Unable to establish connection"), "Unable to establish connection"),
        (SimpleNamespace(unrestricted=None), "Keystone did not say"),
    ],
)  # fmt: skip
def test_what_keystone_will_not_say_is_one_warning_line_never_a_guess(shown, why):
    warnings = check(Keystone("cred-1", shown=shown))
    assert warnings == [f"could not check that the application credential cred-1 is unrestricted ({why}): {FIX}"]


def test_the_command_refuses_a_restricted_credential_exit_2_one_line_nothing_written(
    tmp_path: Path, clouds_yaml, monkeypatch
):
    clouds_yaml()  # a shell without OS_* values
    conn = Keystone("cred-1", restricted=True)
    monkeypatch.setattr(setup_login, "login", lambda auth: conn)
    project = tmp_path / "p"
    args = ["--auth-url", URL, "--application-credential-id", "cred-1", "--pool", "a", "--flavor", "f"]
    result = CliRunner().invoke(
        app,
        ["setup", "--project", str(project), "--non-interactive", *args, "--image", "i", "--new-key"],
        env={"OS_APPLICATION_CREDENTIAL_SECRET": SECRET},
    )
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: setup: the application credential cred-1 is restricted: {FIX}; make one so, or log in with a password"
    )
    assert SECRET not in result.output and conn.closed
    assert not project.exists()


def test_a_login_refused_never_shows_a_password_in_the_auth_url():
    options = {"auth_url": "http://u:URLSECRET@127.0.0.1:9/v3", "username": "u", "password": "pw", "project_name": "p"}
    auth = setup_login.CloudAuth(options=tuple(sorted(options.items())))
    with pytest.raises(setup_login.CloudUnreachable) as caught:
        setup_login.login(auth)  # nothing answers on port 9: openstacksdk's error quotes the URL
    assert str(caught.value).startswith("Keystone at http://***@127.0.0.1:9/v3 refused the login")
    assert "URLSECRET" not in str(caught.value) and "http://***@127.0.0.1:9/v3/auth/tokens" in str(caught.value)
