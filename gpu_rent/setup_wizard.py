"""`gpu-rent setup`: a project folder (.env, gpu-rent.vars, an SSH key) that doctor passes.

Three layers, so the prompts (setup_prompts) sit on the same checks as the options: the answers (what the user
gave, merged over what the project already has), the checks against the cloud (each refusal one line naming the
option and the choices), and the writes, which happen only after every check passed.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from dotenv import dotenv_values

from gpu_rent import setup_catalog
from gpu_rent.atomic import write_atomically
from gpu_rent.config import DEFAULT_SSH_KEY, ENV_FILE, VARS_FILE, CloudAuth, ConfigError
from gpu_rent.rental import CloudUnreachable

TEMPLATE = Path(__file__).resolve().parents[1] / "examples" / VARS_FILE
NEW_KEY_NAME = "id_ed25519"
WHERE = "setup"
# the three keys setup fills in: option name -> gpu-rent.vars key
VARS_OPTIONS = {"pool": "POOL", "flavor": "FLAVOR", "image": "IMAGE"}
_VARS_LINE = re.compile(r"^(?P<key>POOL|FLAVOR|IMAGE|PRICE_PER_HOUR)\s*=\s*(?P<value>.*)$")
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
    """POOL, FLAVOR, IMAGE and PRICE_PER_HOUR set in the project; the template's <...> placeholders do not count."""
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


def merged(given: Answers) -> Answers:
    """The given options over what the project already has: a re-run changes only what it is told to."""
    project = given.project
    env, vars_ = existing_env(project), existing_vars(project)
    key = _path(given.key, env.get("GPU_RENT_SSH_KEY"), project)
    if key is None:
        key = project / NEW_KEY_NAME if given.new_key else Path(DEFAULT_SSH_KEY).expanduser()
    return replace(
        given,
        cloud=given.cloud or env.get("OS_CLOUD"),
        clouds_yaml=_path(given.clouds_yaml, env.get("OS_CLIENT_CONFIG_FILE"), project),
        pool=given.pool or vars_.get("POOL"),
        flavor=given.flavor or vars_.get("FLAVOR"),
        image=given.image or vars_.get("IMAGE"),
        key=key,
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


def login(auth: CloudAuth):
    """A Keystone login before any other question: a refused password must not look like a missing flavor."""
    try:
        conn = auth.connect()
        conn.authorize()
    except Exception as e:  # keystoneauth raises many kinds; all mean the same to the user
        text = " ".join(str(e).split())[:300]
        raise CloudUnreachable(f"cloud {auth.cloud!r} refused the login or did not answer: {text}") from None
    return conn


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


def check_flavor(conn, wanted: str | None) -> setup_catalog.GpuFlavor:
    rows = _flavor_rows(conn)
    gpus = setup_catalog.gpu_flavors(rows)
    choices = [f.describe() for f in gpus]
    wanted = _required("flavor", wanted, choices)
    found = setup_catalog.find_flavor(gpus, wanted)
    if found is not None:
        return found
    known = any(wanted in (r["name"], r["id"]) for r in rows)
    what = "not a GPU flavor" if known else "no such flavor here"
    raise _refuse(f"--flavor {wanted}: {what} (GPU flavors: {', '.join(choices) or 'none'})")


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
    auth = check_cloud(answers)
    conn = login(auth)
    try:
        pool = check_pool(conn, answers.pool)
        flavor = check_flavor(conn, answers.flavor)
        image = check_image(conn, answers.image)
    finally:
        conn.close()
    key_to_make = check_key(answers)
    return Checked(replace(answers, pool=pool, flavor=flavor.label, image=image), auth, flavor, key_to_make)


# ---------------------------------------------------------------------------------------------- writes


def _env_quote(value: str) -> str:
    """Single quotes when python-dotenv could read the bare value otherwise (a " #" would start a comment)."""
    if re.fullmatch(r"[\w./:@~+-]*", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _set_lines(text: str, values: dict[str, str], pattern: str, quote=lambda v: v) -> str:
    """Each KEY=... line set to its new value in place; keys not found are added at the end."""
    lines, done = text.splitlines(), set()
    for i, line in enumerate(lines):
        match = re.match(pattern, line)
        if match and match["key"] in values:
            key = match["key"]
            lines[i] = f"{key}={quote(values[key])}"
            done.add(key)
    lines += [f"{k}={quote(v)}" for k, v in values.items() if k not in done]
    return "\n".join(lines) + "\n"


def vars_text(project: Path, values: dict[str, str]) -> str:
    """The project's gpu-rent.vars (or the example, so the two stay in step) with POOL, FLAVOR and IMAGE set."""
    path = project / VARS_FILE
    source = path if path.is_file() else TEMPLATE
    if not source.is_file():
        raise _refuse(f"the template {TEMPLATE} is not there: gpu-rent is installed without its examples folder")
    return _set_lines(source.read_text(encoding="utf-8"), values, r"^\s*(?P<key>POOL|FLAVOR|IMAGE)\s*=")


def env_text(project: Path, values: dict[str, str]) -> str:
    """The project's .env with the given keys set; its other lines (a CIVITAI_TOKEN, comments) stay."""
    path = project / ENV_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Cloud auth and the SSH key of gpu-rent.\n"
    return _set_lines(text, values, r"^\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=", _env_quote)


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
    write_atomically(vars_path, vars_text(a.project, {"POOL": a.pool, "FLAVOR": a.flavor, "IMAGE": a.image}), 0o644)
    env = {"OS_CLOUD": a.cloud}
    if a.clouds_yaml:
        env["OS_CLIENT_CONFIG_FILE"] = str(a.clouds_yaml)
    env["GPU_RENT_SSH_KEY"] = str(a.key)
    env_path = a.project / ENV_FILE
    write_atomically(env_path, env_text(a.project, env), 0o600)
    return [*written, vars_path, env_path]


def prepared(given: Answers) -> Answers:
    """The given options, the project folder made absolute, over what the project already has."""
    return merged(replace(given, project=given.project.expanduser().resolve()))


def run(given: Answers) -> tuple[Checked, list[Path]]:
    """The non-interactive setup: merge, check everything, then write."""
    checked = check(prepared(given))
    return checked, write(checked)
