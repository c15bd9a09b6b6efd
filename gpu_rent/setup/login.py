"""Who `gpu-rent setup` logs in as, and where: a clouds.yaml entry, or typed OS_* values (a password or an
application credential), checked and logged in with before any other question.

The typed values merged over the project's .env, the .env keys of each kind of login, their checks (each refusal one
line naming the option), the Keystone login with any secret blanked out of its errors, whether an application
credential may do what `up` asks of it, and the catalog's regions. setup_wizard builds on this; nothing here knows
the rest of the answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from keystoneauth1 import exceptions as ksa_exceptions
from openstack import exceptions as sdk_exceptions

from gpu_rent.cloud.connect import CloudUnreachable
from gpu_rent.cloud.connect import login as cloud_login
from gpu_rent.project.env import CloudAuth
from gpu_rent.project.errors import ConfigError, masked, one_line

WHERE = "setup"
# the two kinds of typed login, as .env's OS_AUTH_TYPE names them (config passes it to openstacksdk as auth_type)
PASSWORD = "password"
APP_CREDENTIAL = "v3applicationcredential"
DEFAULT_DOMAIN = "Default"
# Every .env key that says who logs in where: a login of one kind removes the others' lines, so .env never holds
# two logins that contradict each other (OS_CACERT, OS_INTERFACE and the like are not a login: they stay).
AUTH_KEYS = frozenset({
    "OS_CLOUD", "OS_CLOUD_NAME", "OS_CLIENT_CONFIG_FILE", "OS_CLIENT_SECURE_FILE", "OS_AUTH_URL", "OS_AUTH_TYPE",
    "OS_USERNAME", "OS_USER_ID", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_PROJECT_ID", "OS_TENANT_NAME",
    "OS_TENANT_ID", "OS_USER_DOMAIN_NAME", "OS_USER_DOMAIN_ID", "OS_PROJECT_DOMAIN_NAME", "OS_PROJECT_DOMAIN_ID",
    "OS_DOMAIN_NAME", "OS_DOMAIN_ID", "OS_DEFAULT_DOMAIN", "OS_APPLICATION_CREDENTIAL_ID",
    "OS_APPLICATION_CREDENTIAL_NAME", "OS_APPLICATION_CREDENTIAL_SECRET", "OS_TOKEN", "OS_SYSTEM_SCOPE",
    "OS_REGION_NAME",
})  # fmt: skip


@dataclass(frozen=True)
class Login:
    """OS_* values typed in (or given as options), for a password or an application credential; None: not given.

    The password and the secret come from the environment or a hidden prompt, never from argv, and no repr shows
    them.
    """

    kind: str | None = None  # PASSWORD or APP_CREDENTIAL; None while only a secret or a shared value is given
    auth_url: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    project_name: str | None = None
    user_domain: str | None = None
    project_domain: str | None = None
    region: str | None = None
    credential_id: str | None = None
    credential_secret: str | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The .env lines of this login, in the order written, exactly the OS_* keys config reads."""
        keys = _PASSWORD_KEYS if self.kind == PASSWORD else _APP_CREDENTIAL_KEYS
        values = {env_key: getattr(self, name) for name, env_key in keys.items()}
        if self.kind == APP_CREDENTIAL:
            values = {"OS_AUTH_URL": values.pop("OS_AUTH_URL"), "OS_AUTH_TYPE": APP_CREDENTIAL, **values}
        return {k: v for k, v in values.items() if v}

    def secrets(self) -> list[str]:
        return [s for s in (self.password, self.credential_secret) if s]


# field -> .env key and the option that gives it (None: the environment only, argv is visible in ps)
_FIELDS = {
    "auth_url": ("OS_AUTH_URL", "--auth-url"),
    "username": ("OS_USERNAME", "--username"),
    "password": ("OS_PASSWORD", None),
    "project_name": ("OS_PROJECT_NAME", "--project-name"),
    "user_domain": ("OS_USER_DOMAIN_NAME", "--user-domain"),
    "project_domain": ("OS_PROJECT_DOMAIN_NAME", "--project-domain"),
    "region": ("OS_REGION_NAME", "--region"),
    "credential_id": ("OS_APPLICATION_CREDENTIAL_ID", "--application-credential-id"),
    "credential_secret": ("OS_APPLICATION_CREDENTIAL_SECRET", None),
}
_PASSWORD_KEYS = {f: _FIELDS[f][0] for f in ("auth_url", "username", "password", "project_name", "user_domain",
                                             "project_domain", "region")}  # fmt: skip
_APP_CREDENTIAL_KEYS = {f: _FIELDS[f][0] for f in ("auth_url", "credential_id", "credential_secret", "region")}
# what only one kind has, so giving it picks that kind
_PASSWORD_ONLY = ("username", "project_name", "user_domain", "project_domain")
HTTP_URL = re.compile(r"https?://[^\s/?#]+(/\S*)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# why a restricted application credential cannot run `up`: the idle-killer's credential is made with this login
_UNRESTRICTED_ONLY = (
    "gpu-rent up makes a credential for the VM's idle-killer, which Keystone allows only to one made with "
    "`openstack application credential create --unrestricted`"
)


def _refuse(message: str) -> ConfigError:
    return ConfigError(WHERE, message)


# ---------------------------------------------------------------------------------------------- the answers


def env_kind(env: dict[str, str]) -> str | None:
    """Which login a .env holds, decided as config decides it: OS_CLOUD first, then OS_AUTH_URL."""
    if env.get("OS_CLOUD"):
        return "cloud"
    if not env.get("OS_AUTH_URL"):
        return None
    app = env.get("OS_AUTH_TYPE", "").lower() in (APP_CREDENTIAL, "applicationcredential")
    return APP_CREDENTIAL if app or env.get("OS_APPLICATION_CREDENTIAL_ID") else PASSWORD


def _stored_login(env: dict[str, str]) -> Login:
    kind = env_kind(env)
    if kind not in (PASSWORD, APP_CREDENTIAL):
        return Login()
    return Login(kind, **{name: env.get(env_key) for name, (env_key, _) in _FIELDS.items()})


def _given_kind(login: Login) -> str | None:
    if login.credential_id:
        return APP_CREDENTIAL
    if any(getattr(login, name) for name in _PASSWORD_ONLY):
        return PASSWORD
    return None


def _options_given(login: Login) -> list[str]:
    return [option for name, (_, option) in _FIELDS.items() if option and getattr(login, name)]


def refuse_two_logins(cloud: str | None, login: Login | None) -> None:
    """Two logins asked for at once: refused before anything else, as the user must say which."""
    login = login or Login()
    options = _options_given(login)
    if cloud and options:
        raise _refuse(f"--cloud and {options[0]}: a clouds.yaml entry or typed OS_* values, not both")
    both = [f"--{n.replace('_', '-')}" for n in _PASSWORD_ONLY if getattr(login, n)]
    if login.credential_id and both:
        raise _refuse(
            f"--application-credential-id and {both[0]}: an application credential carries its user and project"
        )


def merged_login(given: Login | None, env: dict[str, str], cloud_given: bool = False) -> Login | None:
    """The typed login: the given values over the project's own; None for a clouds.yaml entry."""
    given = given or Login()
    stored, kind = _stored_login(env), _given_kind(given)
    if kind is None:
        if given.auth_url or given.region:  # shared by both kinds: the project's kind, else a password
            kind = stored.kind or PASSWORD
        elif cloud_given or stored.kind is None:
            return None
        else:
            kind = stored.kind
    # the other kind's Keystone and region stay: the same cloud, logged in to another way
    base = stored if stored.kind == kind else Login(auth_url=stored.auth_url, region=stored.region)
    values = {f.name: getattr(given, f.name) or getattr(base, f.name) for f in fields(Login) if f.name != "kind"}
    login = Login(kind, **values)
    if kind == PASSWORD:
        login = replace(
            login,
            user_domain=login.user_domain or DEFAULT_DOMAIN,
            project_domain=login.project_domain or DEFAULT_DOMAIN,
        )
    return login


def auth_env(
    cloud: str | None, clouds_yaml: Path | None, login: Login | None, env_now: dict[str, str]
) -> tuple[dict[str, str], frozenset[str]]:
    """The .env lines of the login, and the login keys to remove: those of any other login (env_now: .env as it is)."""
    if login:
        values = login.env()
        return values, AUTH_KEYS - values.keys()
    values = {"OS_CLOUD": cloud}
    if clouds_yaml:
        values["OS_CLIENT_CONFIG_FILE"] = str(clouds_yaml)
    drop = AUTH_KEYS - values.keys()
    if env_kind(env_now) == "cloud":
        drop -= {"OS_REGION_NAME"}  # beside OS_CLOUD it is the user's override of the entry's region: kept
    return values, drop


# ---------------------------------------------------------------------------------------------- checks


def cloud_names(clouds_yaml: Path | None) -> tuple[list[str], str | None]:
    """The clouds.yaml entries (without the network) and the file openstacksdk found them in."""
    if clouds_yaml and not clouds_yaml.is_file():
        raise _refuse(f"--clouds-yaml {clouds_yaml}: not found")
    # a cloud name only selects CloudAuth's clouds.yaml branch; none is picked yet when the prompts list them
    auth = CloudAuth(cloud="?", config_file=clouds_yaml)
    try:
        config = auth.openstack_config()
        # without any entry openstacksdk makes one named "defaults" of its defaults alone (no auth): not a cloud
        names = [n for n, c in config.cloud_config["clouds"].items() if n != "defaults" or "auth" in c]
    except Exception as e:  # a malformed clouds.yaml surfaces as YAML, JSON or OS errors
        # a YAML error quotes the line it stopped at, which may hold the password: where, never what
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise _refuse(f"cannot read clouds.yaml{at} ({type(e).__name__})") from None
    return sorted(names), config.config_filename


def check_cloud(cloud: str | None, clouds_yaml: Path | None) -> CloudAuth:
    """The clouds.yaml entry, resolved without the network."""
    if not cloud:
        raise _refuse("--cloud is required: the clouds.yaml entry to use")
    if clouds_yaml and not clouds_yaml.is_file():
        raise _refuse(f"--clouds-yaml {clouds_yaml}: not found")
    try:
        names, _ = cloud_names(clouds_yaml)
    except ConfigError as e:
        raise _refuse(f"--cloud {cloud}: {e.message}") from None
    if cloud not in names:
        where = clouds_yaml or "any clouds.yaml"
        raise _refuse(f"--cloud {cloud} is not in {where} (clouds there: {', '.join(names) or 'none'})")
    auth = CloudAuth(cloud=cloud, config_file=clouds_yaml)
    try:
        auth.region()
    except Exception as e:
        raise _refuse(f"--cloud {cloud}: {' '.join(str(e).split())[:300]}") from None
    return auth


def check_login(login: Login) -> CloudAuth:
    """Typed OS_* values, complete and resolved without the network, as the CloudAuth config will load from them."""
    required = ("auth_url", "username", "password", "project_name") if login.kind == PASSWORD else (
        "auth_url", "credential_id", "credential_secret")  # fmt: skip
    for name in required:
        env_key, option = _FIELDS[name]
        if not getattr(login, name):
            what = "typed OS_* values" if login.kind == PASSWORD else "an application credential"
            if option is None:  # a secret: the environment, never argv
                raise _refuse(f"{env_key} is required in the environment for {what} (never an option: ps shows argv)")
            raise _refuse(f"{option} is required for {what}")
    for name, (env_key, option) in _FIELDS.items():
        value = getattr(login, name)
        if value and _CONTROL.search(value):
            raise _refuse(f"{option or env_key} holds a control character (a line break?)")
    if not HTTP_URL.fullmatch(login.auth_url):
        raise _refuse(
            f"--auth-url {masked(login.auth_url)}: not an http(s) URL (e.g. https://keystone.example.com:5000/v3)"
        )
    options = {k[3:].lower(): v for k, v in login.env().items()}  # what config's OS_AUTH_URL branch passes on
    auth = CloudAuth(options=tuple(sorted(options.items())))
    try:
        auth.region()
    except Exception as e:
        raise _refuse(f"--auth-url {masked(login.auth_url)}: {one_line(e, login.secrets())[:300]}") from None
    return auth


def check_auth(cloud: str | None, clouds_yaml: Path | None, login: Login | None) -> CloudAuth:
    return check_login(login) if login else check_cloud(cloud, clouds_yaml)


# ---------------------------------------------------------------------------------------------- the login


def _who(auth: CloudAuth) -> str:
    return f"cloud {auth.cloud!r}" if auth.cloud else f"Keystone at {masked(str(dict(auth.options).get('auth_url')))}"


def login(auth: CloudAuth):
    """A Keystone login before any other question: a refused password must not look like a missing flavor."""
    options = dict(auth.options)
    secrets = [options[k] for k in ("password", "application_credential_secret") if options.get(k)]
    try:
        return cloud_login(auth, secrets=secrets)
    except CloudUnreachable as e:
        raise CloudUnreachable(f"{_who(auth)} refused the login or did not answer: {e.said[:300]}") from None


def check_credential(conn, warn: Callable[[str], None]) -> None:
    """A login with a restricted application credential refused: `up` could not make the idle-killer's credential.

    Keystone's word, never a guess: the `restricted` its token carries, else the credential as Keystone shows it to
    its own user. When Keystone tells neither, a warning (warn) and on; a password login is not asked about.
    """
    access = conn.session.auth.get_access(conn.session)
    credential = access.application_credential_id
    if not credential:
        return
    restricted, why = access.application_credential.get("restricted"), "Keystone did not say"
    if restricted is None:
        try:
            shown = conn.identity.get_application_credential(user=access.user_id, application_credential=credential)
            restricted = None if shown.unrestricted is None else not shown.unrestricted
        except (sdk_exceptions.SDKException, ksa_exceptions.ClientException) as e:
            why = one_line(e)[:300]
    if restricted is None:
        warn(f"could not check that the application credential {credential} is unrestricted ({why}): "
             f"{_UNRESTRICTED_ONLY}")  # fmt: skip
    elif restricted:
        raise _refuse(
            f"the application credential {credential} is restricted: {_UNRESTRICTED_ONLY}; make one so, "
            "or log in with a password"
        )


def catalog_regions(conn) -> list[str]:
    """The regions the login's catalog has a compute endpoint in (any endpoint when none is compute)."""
    catalog = conn.config.get_service_catalog()
    if catalog is None:
        return []
    found = catalog.get_endpoints_data(service_type="compute") or catalog.get_endpoints_data()
    return sorted({e.region_name for endpoints in found.values() for e in endpoints if e.region_name})


def check_region(conn, region: str | None) -> str | None:
    """The region to use: the given one when the catalog has it, else the catalog's only one; None: no catalog."""
    regions = catalog_regions(conn)
    if not regions:
        return region
    if not region:
        if len(regions) == 1:
            return regions[0]
        raise _refuse(f"--region is required (here: {', '.join(regions)})")
    if region not in regions:
        raise _refuse(f"--region {region}: not in the cloud's catalog (regions: {', '.join(regions)})")
    return region
