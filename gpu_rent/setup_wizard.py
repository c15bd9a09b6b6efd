"""`gpu-rent setup`: a project folder (.env, gpu-rent.vars, an SSH key) that doctor passes.

Three layers, so the prompts (setup_prompts) sit on the same checks as the options: the answers (what the user
gave, merged over what the project already has), the checks against the cloud (each refusal one line naming the
option and the choices), and the writes, which happen only after every check passed.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from dotenv import dotenv_values

from gpu_rent import setup_catalog
from gpu_rent.atomic import write_atomically
from gpu_rent.config import DEFAULT_SSH_KEY, ENV_FILE, VARS_FILE, CloudAuth, ConfigError
from gpu_rent.rental import CloudUnreachable

TEMPLATE = Path(__file__).resolve().parents[1] / "examples" / VARS_FILE
NEW_KEY_NAME = "id_ed25519"
WHERE = "setup"
# the keys setup fills in: option name -> gpu-rent.vars key
VARS_OPTIONS = {
    "pool": "POOL", "flavor": "FLAVOR", "image": "IMAGE", "price-per-hour": "PRICE_PER_HOUR",
    "flavor-fallback": "FLAVOR_FALLBACK",
}  # fmt: skip
_VARS_LINE = re.compile(r"^(?P<key>POOL|FLAVOR|IMAGE|PRICE_PER_HOUR|FLAVOR_FALLBACK)\s*=\s*(?P<value>.*)$")
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
# extra specs that say which zones a flavor runs in (aggregate_instance_extra_specs:availability_zone and the like)
_ZONE_SPEC = re.compile(r"(^|:)availability_zones?$", re.IGNORECASE)


@dataclass(frozen=True)
class Answers:
    """What the project will hold; None is "not given and not in the project yet"."""

    project: Path
    cloud: str | None = None
    clouds_yaml: Path | None = None
    pool: str | None = None
    flavor: str | None = None
    image: str | None = None
    key: Path | None = None
    new_key: bool = False
    login: Login | None = None  # typed OS_* values instead of a clouds.yaml entry
    price: str | None = None  # PRICE_PER_HOUR as written; None: not given, "": unset
    flavor_fallback: tuple[str, ...] | None = None  # FLAVOR_FALLBACK; None: not given, (): none


@dataclass(frozen=True)
class Checked:
    answers: Answers
    auth: CloudAuth
    flavor: setup_catalog.GpuFlavor
    key_to_make: Path | None


def _refuse(message: str) -> ConfigError:
    return ConfigError(WHERE, message)


# ---------------------------------------------------------------------------------------------- answers


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def existing_vars(project: Path) -> dict[str, str]:
    """The keys setup fills in, as the project has them; the template's <...> placeholders do not count."""
    path = project / VARS_FILE
    if not path.is_file():
        return {}
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _VARS_LINE.match(line.strip())
        value = _unquoted(match["value"]) if match else ""
        if value and not value.startswith("<"):
            found[match["key"]] = value
    return found


def existing_env(project: Path) -> dict[str, str]:
    path = project / ENV_FILE
    if not path.is_file():
        return {}
    return {k: v for k, v in dotenv_values(path, interpolate=False).items() if v}


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


def _contradictions(given: Answers) -> None:
    """Two logins asked for at once: refused before anything else, as the user must say which."""
    login = given.login or Login()
    options = _options_given(login)
    if given.cloud and options:
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


def merged(given: Answers) -> Answers:
    """The given options over what the project already has: a re-run changes only what it is told to."""
    _contradictions(given)
    project = given.project
    env, vars_ = existing_env(project), existing_vars(project)
    key = _path(given.key, env.get("GPU_RENT_SSH_KEY"), project)
    if key is None:
        key = project / NEW_KEY_NAME if given.new_key else Path(DEFAULT_SSH_KEY).expanduser()
    login = merged_login(given.login, env, bool(given.cloud))
    fallback = given.flavor_fallback
    if fallback is None:
        fallback = tuple(f.strip() for f in vars_.get("FLAVOR_FALLBACK", "").split(",") if f.strip())
    return replace(
        given,
        cloud=None if login else given.cloud or env.get("OS_CLOUD"),
        clouds_yaml=_path(given.clouds_yaml, env.get("OS_CLIENT_CONFIG_FILE"), project),
        pool=given.pool or vars_.get("POOL"),
        flavor=given.flavor or vars_.get("FLAVOR"),
        image=given.image or vars_.get("IMAGE"),
        key=key,
        login=login,
        price=vars_.get("PRICE_PER_HOUR") if given.price is None else given.price,
        flavor_fallback=tuple(f for f in fallback if f),
    )


def _path(given: Path | None, in_env: str | None, project: Path) -> Path | None:
    """A path typed in a shell is relative to the shell; one from .env, to the project (as config reads it)."""
    if given is not None:
        return (Path.cwd() / given.expanduser()).resolve()
    if in_env:
        return (project / Path(in_env).expanduser()).resolve()
    return None


# ---------------------------------------------------------------------------------------------- checks


def cloud_names(answers: Answers) -> tuple[list[str], str | None]:
    """The clouds.yaml entries (without the network) and the file openstacksdk found them in."""
    if answers.clouds_yaml and not answers.clouds_yaml.is_file():
        raise _refuse(f"--clouds-yaml {answers.clouds_yaml}: not found")
    # a cloud name only selects CloudAuth's clouds.yaml branch; none is picked yet when the prompts list them
    auth = CloudAuth(cloud=answers.cloud or "?", config_file=answers.clouds_yaml)
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


def check_cloud(answers: Answers) -> CloudAuth:
    """The clouds.yaml entry, resolved without the network."""
    if not answers.cloud:
        raise _refuse("--cloud is required: the clouds.yaml entry to use")
    if answers.clouds_yaml and not answers.clouds_yaml.is_file():
        raise _refuse(f"--clouds-yaml {answers.clouds_yaml}: not found")
    try:
        names, _ = cloud_names(answers)
    except ConfigError as e:
        raise _refuse(f"--cloud {answers.cloud}: {e.message}") from None
    if answers.cloud not in names:
        where = answers.clouds_yaml or "any clouds.yaml"
        raise _refuse(f"--cloud {answers.cloud} is not in {where} (clouds there: {', '.join(names) or 'none'})")
    auth = CloudAuth(cloud=answers.cloud, config_file=answers.clouds_yaml)
    try:
        auth.region()
    except Exception as e:
        raise _refuse(f"--cloud {answers.cloud}: {' '.join(str(e).split())[:300]}") from None
    return auth


HTTP_URL = re.compile(r"https?://[^\s/?#]+(/\S*)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _one_line(error: Exception, secrets: list[str]) -> str:
    """An outside error's text on one line, with any secret it might quote blanked out."""
    text = " ".join(str(error).split())
    for secret in secrets:
        text = text.replace(secret, "***")
    return text[:300]


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
        raise _refuse(f"--auth-url {login.auth_url}: not an http(s) URL (e.g. https://keystone.example.com:5000/v3)")
    options = {k[3:].lower(): v for k, v in login.env().items()}  # what config's OS_AUTH_URL branch passes on
    auth = CloudAuth(options=tuple(sorted(options.items())))
    try:
        auth.region()
    except Exception as e:
        raise _refuse(f"--auth-url {login.auth_url}: {_one_line(e, login.secrets())}") from None
    return auth


def check_auth(answers: Answers) -> CloudAuth:
    return check_login(answers.login) if answers.login else check_cloud(answers)


def _who(auth: CloudAuth) -> str:
    return f"cloud {auth.cloud!r}" if auth.cloud else f"Keystone at {dict(auth.options).get('auth_url')}"


def login(auth: CloudAuth):
    """A Keystone login before any other question: a refused password must not look like a missing flavor."""
    options = dict(auth.options)
    secrets = [options[k] for k in ("password", "application_credential_secret") if options.get(k)]
    try:
        conn = auth.connect()
        conn.authorize()
    except Exception as e:  # keystoneauth raises many kinds; all mean the same to the user
        raise CloudUnreachable(f"{_who(auth)} refused the login or did not answer: {_one_line(e, secrets)}") from None
    return conn


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


def in_region(
    auth: CloudAuth, conn, answers: Answers, region: str | None, connect: Callable | None = None
) -> tuple[Answers, CloudAuth, object]:
    """The answers, auth and connection for the region settled on; logged in again when it is not the first's."""
    if answers.login is None or region == answers.login.region:
        return answers, auth, conn
    answers = replace(answers, login=replace(answers.login, region=region))
    conn.close()
    auth = check_login(answers.login)
    return answers, auth, (connect or login)(auth)


def check_price(price: str | None) -> str | None:
    """PRICE_PER_HOUR as typed when it is a number, 0 or more; None: leave it unset."""
    if not price:
        return None
    try:
        value = float(price)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise _refuse(f"--price-per-hour {price}: not a price (a number, 0 or more, e.g. 1.25)")
    return price


def _required(option: str, value: str | None, choices: list[str]) -> str:
    if not value:
        raise _refuse(f"--{option} is required (here: {', '.join(choices) or 'none'})")
    return value


def pool_choices(conn) -> list[str]:
    return sorted({z.name for z in conn.compute.availability_zones()})


def gpu_pools(conn) -> set[str] | None:
    """Pools some GPU flavor runs in, when the flavors' extra specs name zones; None when the cloud does not tell."""
    named = None
    for row in _flavor_rows(conn):
        if setup_catalog.gpu_flavor(row) is None:
            continue
        for key, value in row["extra_specs"].items():
            if _ZONE_SPEC.search(key):
                named = (named or set()) | {z.strip() for z in str(value).split(",") if z.strip()}
    return named


def check_pool(conn, pool: str | None) -> str:
    zones = pool_choices(conn)
    pool = _required("pool", pool, zones)
    if pool not in zones:
        raise _refuse(f"--pool {pool}: no such pool here (pools: {', '.join(zones) or 'none'})")
    return pool


def _flavor_rows(conn) -> list[dict]:
    return [
        {"id": f.id, "name": f.name, "vcpus": f.vcpus, "ram": f.ram, "extra_specs": f.extra_specs or {}}
        for f in conn.compute.flavors(details=True)
    ]


def flavor_choices(conn) -> list[setup_catalog.GpuFlavor]:
    return setup_catalog.gpu_flavors(_flavor_rows(conn))


def check_flavor(conn, wanted: str | None, option: str = "flavor") -> setup_catalog.GpuFlavor:
    rows = _flavor_rows(conn)
    gpus = setup_catalog.gpu_flavors(rows)
    choices = [f.describe() for f in gpus]
    wanted = _required(option, wanted, choices)
    found = setup_catalog.find_flavor(gpus, wanted)
    if found is not None:
        return found
    known = any(wanted in (r["name"], r["id"]) for r in rows)
    what = "not a GPU flavor" if known else "no such flavor here"
    raise _refuse(f"--{option} {wanted}: {what} (GPU flavors: {', '.join(choices) or 'none'})")


def check_fallbacks(conn, wanted: tuple[str, ...] | None, flavor: setup_catalog.GpuFlavor) -> tuple[str, ...]:
    """Each a GPU flavor of this cloud, other than FLAVOR itself, once: as FLAVOR_FALLBACK lists them."""
    picked = []
    for name in wanted or ():
        found = check_flavor(conn, name, "flavor-fallback")
        if "," in name:  # FLAVOR_FALLBACK is comma-separated
            raise _refuse(f"--flavor-fallback {name}: a name with a comma cannot be listed in FLAVOR_FALLBACK")
        if found == flavor:
            raise _refuse(f"--flavor-fallback {name}: is FLAVOR itself; a fallback is another flavor")
        if name not in picked:
            picked.append(name)
    return tuple(picked)


def _image_rows(conn) -> list[dict]:
    return [{**(i.properties or {}), "id": i.id, "name": i.name, "status": i.status} for i in conn.image.images()]


def image_choices(conn) -> list[dict]:
    """Active images, GPU-looking ones first: the order a prompt offers them in."""
    return setup_catalog.usable_images(_image_rows(conn))


def check_image(conn, wanted: str | None) -> str:
    images = image_choices(conn)
    choices = [setup_catalog.image_label(i) for i in images]
    wanted = _required("image", wanted, choices)
    if setup_catalog.find_image(images, wanted) is None:
        raise _refuse(f"--image {wanted}: no such active image here (images, GPU ones first: {', '.join(choices)})")
    return wanted


def check_key(answers: Answers) -> Path | None:
    """The key to make, or None when the key is there (a private file, or a .pub whose key an agent holds)."""
    key = answers.key
    public = key.with_name(key.name + ".pub")
    if key.is_file() or public.is_file():
        return None
    if answers.new_key:
        if not key.parent.is_dir() and key.parent != answers.project:
            raise _refuse(f"--key {key}: folder {key.parent} not found")
        return key
    raise _refuse(f"--key {key}: not found (add --new-key to make one, or ssh-keygen -t ed25519 -f {key})")


def check_project(answers: Answers) -> None:
    if not answers.project.is_dir() and not answers.project.parent.is_dir():
        raise _refuse(f"--project {answers.project}: neither it nor its parent folder exists")


def check(answers: Answers) -> Checked:
    """Every check, the login first; nothing is written here."""
    check_project(answers)
    price = check_price(answers.price)
    auth = check_auth(answers)
    conn = login(auth)
    try:
        if answers.login:
            answers, auth, conn = in_region(auth, conn, answers, check_region(conn, answers.login.region))
        pool = check_pool(conn, answers.pool)
        flavor = check_flavor(conn, answers.flavor)
        fallbacks = check_fallbacks(conn, answers.flavor_fallback, flavor)
        image = check_image(conn, answers.image)
    finally:
        conn.close()
    key_to_make = check_key(answers)
    answers = replace(answers, pool=pool, flavor=flavor.label, image=image, price=price, flavor_fallback=fallbacks)
    return Checked(answers, auth, flavor, key_to_make)


# ---------------------------------------------------------------------------------------------- writes


def _env_quote(value: str) -> str:
    """Single quotes when python-dotenv could read the bare value otherwise (a " #" would start a comment)."""
    if re.fullmatch(r"[\w./:@~+-]*", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _set_lines(text: str, values: dict[str, str], pattern: str, quote=lambda v: v, drop=frozenset()) -> str:
    """Each KEY=... line set to its new value in place, the lines of keys in drop removed; new keys at the end."""
    lines, done = [], set()
    for line in text.splitlines():
        match = re.match(pattern, line)
        key = match["key"] if match else None
        if key in values:
            line = f"{key}={quote(values[key])}"
            done.add(key)
        elif key in drop:
            continue
        lines.append(line)
    lines += [f"{k}={quote(v)}" for k, v in values.items() if k not in done]
    return "\n".join(lines) + "\n"


def _set_vars(text: str, values: dict[str, str | None]) -> str:
    """The keys set in place: a value over its line, or over its commented default (`# KEY=`), as the example
    shows each optional key; None comments a set key out again, back to its default."""
    lines = text.splitlines()
    active: dict[str, int] = {}
    commented: dict[str, int] = {}
    for i, line in enumerate(lines):
        match = re.match(r"^\s*(?P<hash>#\s*)?(?P<key>[A-Z_]+)\s*=", line)
        if match and match["key"] in values:
            (commented if match["hash"] else active).setdefault(match["key"], i)
    for key, value in values.items():
        if value is None:
            if key in active:
                lines[active[key]] = f"# {key}="
            continue
        at = active.get(key, commented.get(key))
        if at is None:
            lines.append(f"{key}={value}")
        else:
            lines[at] = f"{key}={value}"
    return "\n".join(lines) + "\n"


def vars_text(project: Path, values: dict[str, str | None]) -> str:
    """The project's gpu-rent.vars (or the example, so the two stay in step) with the given keys set."""
    path = project / VARS_FILE
    source = path if path.is_file() else TEMPLATE
    if not source.is_file():
        raise _refuse(f"the template {TEMPLATE} is not there: gpu-rent is installed without its examples folder")
    return _set_vars(source.read_text(encoding="utf-8"), values)


def env_text(project: Path, values: dict[str, str], drop=frozenset()) -> str:
    """The project's .env with the given keys set and those in drop gone; its other lines (a CIVITAI_TOKEN,
    comments) stay."""
    path = project / ENV_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Cloud auth and the SSH key of gpu-rent.\n"
    pattern = r"^\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*="
    return _set_lines(text, values, pattern, _env_quote, drop)


def auth_env(answers: Answers) -> tuple[dict[str, str], frozenset[str]]:
    """The .env lines of the login, and the login keys to remove: those of any other login."""
    if answers.login:
        values = answers.login.env()
        return values, AUTH_KEYS - values.keys()
    values = {"OS_CLOUD": answers.cloud}
    if answers.clouds_yaml:
        values["OS_CLIENT_CONFIG_FILE"] = str(answers.clouds_yaml)
    drop = AUTH_KEYS - values.keys()
    if env_kind(existing_env(answers.project)) == "cloud":
        drop -= {"OS_REGION_NAME"}  # beside OS_CLOUD it is the user's override of the entry's region: kept
    return values, drop


def make_key(key: Path) -> None:
    """An ed25519 key without a passphrase (the tunnel and the watchdog use it unattended), mode 0600."""
    with tempfile.TemporaryDirectory(dir=key.parent, prefix=".gpu-rent-key.") as temp:
        made = Path(temp) / key.name
        made_by = subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-rent", "-f", str(made)],
            capture_output=True,
            text=True,
        )
        if made_by.returncode != 0:
            raise _refuse(f"--new-key: ssh-keygen failed: {made_by.stderr.strip() or made_by.returncode}")
        made.chmod(0o600)
        os.replace(made.with_name(made.name + ".pub"), key.with_name(key.name + ".pub"))
        os.replace(made, key)


def write(checked: Checked) -> list[Path]:
    """The key (when asked for), gpu-rent.vars, then .env: the files written, in that order."""
    a = checked.answers
    a.project.mkdir(exist_ok=True)
    written = []
    if checked.key_to_make is not None:
        make_key(checked.key_to_make)
        written.append(checked.key_to_make)
    vars_path = a.project / VARS_FILE
    values = {
        "POOL": a.pool, "FLAVOR": a.flavor, "IMAGE": a.image, "PRICE_PER_HOUR": a.price or None,
        "FLAVOR_FALLBACK": ",".join(a.flavor_fallback or ()) or None,
    }  # fmt: skip
    write_atomically(vars_path, vars_text(a.project, values), 0o644)
    env, drop = auth_env(a)
    env["GPU_RENT_SSH_KEY"] = str(a.key)
    env_path = a.project / ENV_FILE
    write_atomically(env_path, env_text(a.project, env, drop), 0o600)
    return [*written, vars_path, env_path]


def prepared(given: Answers) -> Answers:
    """The given options, the project folder made absolute, over what the project already has."""
    return merged(replace(given, project=given.project.expanduser().resolve()))


def run(given: Answers) -> tuple[Checked, list[Path]]:
    """The non-interactive setup: merge, check everything, then write."""
    checked = check(prepared(given))
    return checked, write(checked)
