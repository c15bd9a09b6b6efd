"""`gpu-rent setup`: a project folder (.env, gpu-rent.vars, an SSH key) that doctor passes.

Three layers, so the prompts (setup_prompts) sit on the same checks as the options: the answers (what the user
gave, merged over what the project already has), the checks against the cloud (each refusal one line naming the
option and the choices), and the writes, which happen only after every check passed. Who logs in, and how, is
setup_login's: this module asks it for the login and writes the .env lines it names.

One file of ~500 lines on purpose: the three layers share the Answers and Checked types and are read in
the order a run goes through them; splitting them would put one answer's check and its write apart.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from dotenv import dotenv_values

from gpu_rent.project import llm_models
from gpu_rent.project.env import DEFAULT_SSH_KEY, ENV_FILE, CloudAuth
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.keys import VARS_FILE, value_problem
from gpu_rent.project.keys import check_vars_text as config_check_vars_text
from gpu_rent.project.state import StateStore
from gpu_rent.setup import address as setup_address
from gpu_rent.setup import catalog as setup_catalog
from gpu_rent.setup import login as setup_login
from gpu_rent.setup.login import WHERE, Login
from gpu_rent.util.atomic import write_atomically
from gpu_rent.util.checkout import ROOT

TEMPLATE = ROOT / "examples" / VARS_FILE
NEW_KEY_NAME = "id_ed25519"
# the keys setup fills in: option name -> gpu-rent.vars key
VARS_OPTIONS = {
    "pool": "POOL", "flavor": "FLAVOR", "image": "IMAGE", "price-per-hour": "PRICE_PER_HOUR",
    "flavor-fallback": "FLAVOR_FALLBACK", "operator-cidr": "OPERATOR_CIDR", "llm-runtime": "LLM_RUNTIME",
}  # fmt: skip
# LLM_RUNTIME's values: none, or a runtime whose models ollama-models.yaml lists
LLM_RUNTIMES = ("none", *llm_models.RUNTIMES)
# the ollama-models.yaml setup writes beside LLM_RUNTIME=ollama or llamacpp when the project has none: read as
# no models (nothing pulled), its examples commented out
MODELS_STARTER = """\
# The models of the LLM runtime (LLM_RUNTIME in gpu-rent.vars): gpu-rent up and seed-llm bring them to the VM.
# None yet. To add one, replace "ollama: []" by "ollama:" and uncomment the lines below it you need.
ollama: []
#   - llama3.2:1b                             # a name alone, or:
#   - name: qwen3:4b
#     digest: sha256:<64 hex digits>          # optional: the manifest the pull must give

# llama.cpp (LLM_RUNTIME=llamacpp): GGUF files, each checked by its sha256; llama-server serves the one
# marked serve: true, and is not started while none is listed.
llamacpp: []
#   - url: https://huggingface.co/<repo>/resolve/main/model-Q4_K_M.gguf
#     sha256: <64 hex digits>
#     serve: true                             # the one llama-server serves: exactly one
"""
_VARS_LINE = re.compile(rf"^(?P<key>{'|'.join(VARS_OPTIONS.values())})\s*=\s*(?P<value>.*)$")
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
    # --operator-cidr as given; once checked, OPERATOR_CIDR to write (None: the project's line stays, see setup_address)
    operator_cidr: str | None = None
    # --set KEY=VALUE for any other key of gpu-rent.vars, as given ("" puts the key back to its default)
    settings: tuple[str, ...] = ()
    llm_runtime: str | None = None  # LLM_RUNTIME: none, ollama or llamacpp; None: not given, the project's line stays


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


def merged(given: Answers) -> Answers:
    """The given options over what the project already has: a re-run changes only what it is told to."""
    setup_login.refuse_two_logins(given.cloud, given.login)
    project = given.project
    env, vars_ = existing_env(project), existing_vars(project)
    key = _path(given.key, env.get("GPU_RENT_SSH_KEY"), project)
    if key is None:
        key = project / NEW_KEY_NAME if given.new_key else Path(DEFAULT_SSH_KEY).expanduser()
    login = setup_login.merged_login(given.login, env, bool(given.cloud))
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
        llm_runtime=given.llm_runtime or vars_.get("LLM_RUNTIME"),
    )


def _path(given: Path | None, in_env: str | None, project: Path) -> Path | None:
    """A path typed in a shell is relative to the shell; one from .env, to the project (as config reads it)."""
    if given is not None:
        return (Path.cwd() / given.expanduser()).resolve()
    if in_env:
        return (project / Path(in_env).expanduser()).resolve()
    return None


# ---------------------------------------------------------------------------------------------- checks


def in_region(
    auth: CloudAuth, conn, answers: Answers, region: str | None, connect: Callable | None = None
) -> tuple[Answers, CloudAuth, object]:
    """The answers, auth and connection for the region settled on; logged in again when it is not the first's."""
    if answers.login is None or region == answers.login.region:
        return answers, auth, conn
    answers = replace(answers, login=replace(answers.login, region=region))
    conn.close()
    auth = setup_login.check_login(answers.login)
    return answers, auth, (connect or setup_login.login)(auth)


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


def check_llm_runtime(runtime: str | None) -> str | None:
    """LLM_RUNTIME as given when it is one of none, ollama and llamacpp; None: not given."""
    if runtime is not None and runtime not in LLM_RUNTIMES:
        raise _refuse(f"--llm-runtime {runtime}: not an LLM runtime (choices: {', '.join(LLM_RUNTIMES)})")
    return runtime


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


def check(answers: Answers, warn: Callable[[str], None]) -> Checked:
    """Every check, the login first; nothing is written here. warn: a line for what could not be checked."""
    check_project(answers)
    price = check_price(answers.price)
    auth = setup_login.check_auth(answers.cloud, answers.clouds_yaml, answers.login)
    conn = setup_login.login(auth)
    try:
        setup_login.check_credential(conn, warn)
        if answers.login:
            region = setup_login.check_region(conn, answers.login.region)
            answers, auth, conn = in_region(auth, conn, answers, region)
        pool = check_pool(conn, answers.pool)
        flavor = check_flavor(conn, answers.flavor)
        fallbacks = check_fallbacks(conn, answers.flavor_fallback, flavor)
        image = check_image(conn, answers.image)
    finally:
        conn.close()
    key_to_make = check_key(answers)
    existing = existing_vars(answers.project).get("OPERATOR_CIDR")
    operator = setup_address.settle(setup_address.of_login(auth), answers.operator_cidr, existing)
    answers = replace(answers, pool=pool, flavor=flavor.label, image=image, price=price, flavor_fallback=fallbacks,
                      operator_cidr=operator)  # fmt: skip
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
    """The key (when asked for), gpu-rent.vars, .env, then a starter ollama-models.yaml (with an LLM runtime, when
    the project has none): the files written, in that order."""
    a = checked.answers
    vars_path = a.project / VARS_FILE
    values = {
        "POOL": a.pool, "FLAVOR": a.flavor, "IMAGE": a.image, "PRICE_PER_HOUR": a.price or None,
        "FLAVOR_FALLBACK": ",".join(a.flavor_fallback or ()) or None,
    }  # fmt: skip
    if a.operator_cidr:  # over `# OPERATOR_CIDR=auto`, as the example has it; None leaves the line as it is
        values["OPERATOR_CIDR"] = a.operator_cidr
    if a.llm_runtime:  # over `# LLM_RUNTIME=none`; None (not given, none in the project) leaves the line as it is
        values["LLM_RUNTIME"] = a.llm_runtime
    settings = checked_settings(a.settings)
    renaming = _renames_a_rental(a.project, settings)
    if renaming:
        raise _refuse(renaming)
    values |= settings
    text = vars_text(a.project, values)
    config_check_vars_text(text)  # the keys against each other too (two ports alike): nothing written then
    a.project.mkdir(exist_ok=True)
    written = []
    if checked.key_to_make is not None:
        make_key(checked.key_to_make)
        written.append(checked.key_to_make)
    write_atomically(vars_path, text, 0o644)
    env, drop = setup_login.auth_env(a.cloud, a.clouds_yaml, a.login, existing_env(a.project))
    env["GPU_RENT_SSH_KEY"] = str(a.key)
    env_path = a.project / ENV_FILE
    write_atomically(env_path, env_text(a.project, env, drop), 0o600)
    written += [vars_path, env_path]
    models_path = a.project / llm_models.MODELS_FILE
    # never over a file of the user's (nor a link, even a broken one)
    if a.llm_runtime in llm_models.RUNTIMES and not os.path.lexists(models_path):
        write_atomically(models_path, MODELS_STARTER, 0o644)
        written.append(models_path)
    return written


def checked_settings(settings: tuple[str, ...]) -> dict[str, str | None]:
    """--set KEY=VALUE options as keys to write (None: back to the default), each value checked the way the
    settings file is read; the keys setup asks for have their own options."""
    found: dict[str, str | None] = {}
    by_key = {key: option for option, key in VARS_OPTIONS.items()}
    for given in settings:
        key, equals, value = (part.strip() for part in given.partition("="))
        if not equals or not key:
            raise _refuse(f"--set {given}: expected KEY=VALUE, e.g. --set DATA_VOLUME_GB=200")
        key = key.upper()
        if key in by_key:
            raise _refuse(f"--set {key}: setup asks for {key} itself; use --{by_key[key]}")
        if key in found:
            raise _refuse(f"--set {key}: given twice")
        problem = value_problem(key, value)  # as the line will hold it, quotes and all
        if problem:
            raise _refuse(f"--set {problem}")
        found[key] = value if _unquoted(value) else None
    return found


def existing_vars_of(project: Path, key: str) -> str | None:
    """One key's value as the project's gpu-rent.vars holds it (unquoted), None when it is not set."""
    path = project / VARS_FILE
    if not path.is_file():
        return None
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(rf"^\s*{key}\s*=\s*(?P<value>.*)$", line)
        if match:
            return _unquoted(match["value"]) or None
    return None


def _renames_a_rental(project: Path, values: dict[str, str | None]) -> str | None:
    """NAME is every cloud resource's prefix: a project whose state names resources keeps the name it has."""
    if "NAME" not in values or _unquoted(values["NAME"] or "") == (existing_vars_of(project, "NAME") or ""):
        return None
    try:
        resources = json.loads(StateStore(project).path.read_text(encoding="utf-8")).get("resources")
    except (OSError, ValueError, AttributeError):
        return None
    if resources:
        return ("--set NAME: this project has cloud resources named by its NAME (gpu-rent status lists them); "
                "destroy them first, or make a new project folder")  # fmt: skip
    return None


def prepared(given: Answers) -> Answers:
    """The given options, the project folder made absolute, over what the project already has."""
    checked_settings(given.settings)  # a mistyped --set is told before anything is asked
    check_llm_runtime(given.llm_runtime)
    return merged(replace(given, project=given.project.expanduser().resolve()))


def run(given: Answers, warn: Callable[[str], None]) -> tuple[Checked, list[Path]]:
    """The non-interactive setup: merge, check everything, then write."""
    checked = check(prepared(given), warn)
    return checked, write(checked)
