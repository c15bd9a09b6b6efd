"""The settings table: every key of gpu-rent.vars with its default, parser and message, and the file's reader.

Every problem becomes one `ConfigError` line naming the file, the line when known, and the key, so the CLI can
print it and exit 2 before anything in the cloud is touched (SPEC §3).
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from gpu_rent.project import llm_models, swarmui_versions, text_file
from gpu_rent.project.errors import ConfigError, masked

if TYPE_CHECKING:
    pass

VARS_FILE = "gpu-rent.vars"
# Upper bounds far past any real use, so that a slip (a size in MB, a key held down) is refused here and not by the
# cloud mid-up, and no value overflows a datetime (hold: now + IDLE_MINUTES) or a float later.
MAX_VOLUME_GB = 65536  # 64 TiB
MAX_MINUTES = 10 * 365 * 24 * 60  # ten years


# --- the settings table ---------------------------------------------------------------------------------------------


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()


class Key(NamedTuple):
    kind: str  # what a valid value looks like; ends every "bad value" message
    default: Any  # REQUIRED, or the value used when the key is absent or empty
    meaning: str  # one line for docs; also ends the "is required" message


KEYS: dict[str, Key] = {
    "POOL": Key("text", REQUIRED, "the availability zone (pool) to rent in, e.g. POOL=ru-7a"),
    "POOL_FALLBACK": Key(
        "comma-separated list",
        (),
        "pools to try, in order, when POOL has no room; only before the first up (the volumes then pin the pool)",
    ),
    "FLAVOR": Key("text", REQUIRED, "the flavor to rent, e.g. FLAVOR=gpu.a100.1"),
    "FLAVOR_FALLBACK": Key("comma-separated list", (), "flavors to try, in order, when FLAVOR has no capacity"),
    "IMAGE": Key("text", REQUIRED, "the boot image name or id, e.g. IMAGE=Ubuntu 22.04 LTS 64-bit"),
    "VOLUME_TYPE": Key(
        "text; {pool} stands for the pool",
        None,
        "volume type for the boot and data volumes, e.g. fast.{pool} (empty: the cloud's default)",
    ),
    "BOOT_VOLUME_GB": Key(f"GiB, 1..{MAX_VOLUME_GB}", 50, "size of the boot volume"),
    "DATA_VOLUME_GB": Key(
        f"GiB, 1..{MAX_VOLUME_GB}", 100, "size of the data volume (models, output) that outlives the VM"
    ),
    "IDLE_MINUTES": Key(
        f"minutes, 1..{MAX_MINUTES} (ten years)", 30, "the VM deletes itself after this long with an idle backend"
    ),
    "IDLE_GRACE_MINUTES": Key(
        f"minutes, 0..{MAX_MINUTES} (ten years)", 15, "extra idle allowance right after start-up"
    ),
    "IDLE_GPU_PERCENT": Key(
        "a whole number 0..100, or off", 10, "a GPU busier than this (%) is work that keeps the VM; off: not looked at"
    ),
    "IDLE_HUNG_MINUTES": Key(
        f"minutes, 1..{MAX_MINUTES}, or off",
        60,
        "SwarmUI work with every GPU at or below IDLE_GPU_PERCENT this long is hung, not work; off: never",
    ),
    "IDLE_SHELL": Key(
        "true/false, yes/no, on/off or 1/0", True, "a key typed in a shell on the VM keeps it IDLE_MINUTES from the key"
    ),
    "IDLE_LLM": Key(
        "true/false, yes/no, on/off or 1/0",
        True,
        "the LLM runtime's own activity (a model Ollama keeps loaded, a llama.cpp slot at work) keeps the VM",
    ),
    "KEEP_ALIVE_COMMAND": Key(
        "a shell command", None, "run on the VM each minute; the VM stays while it exits 0 (empty: none)"
    ),
    "BILLING_HOUR": Key(
        "off, clock or rental",
        "off",
        "an idle VM lives on to 3 min before the end of an hour already billed (clock: Selectel's clock hours)",
    ),
    "LOCAL_PORT": Key("a TCP port, 1..65535", 17801, "SwarmUI on this machine: http://127.0.0.1:LOCAL_PORT"),
    "REMOTE_PORT": Key("a TCP port, 1..65535", 7801, "SwarmUI's port on the VM (reached only through SSH)"),
    "LLM_RUNTIME": Key(
        "none, ollama or llamacpp",
        "none",
        f"an LLM runtime beside SwarmUI on the VM's GPU, its models in {llm_models.MODELS_FILE} (none: no runtime)",
    ),
    "LLM_LOCAL_PORT": Key(
        "a TCP port, 1..65535, not LOCAL_PORT",
        21434,  # not Ollama's own 11434: a local Ollama keeps its port, and the tunnel its listeners
        "the LLM runtime on this machine: http://127.0.0.1:LLM_LOCAL_PORT (with LLM_RUNTIME on)",
    ),
    "LLM_REMOTE_PORT": Key(
        "a TCP port, 1..65535, not REMOTE_PORT",
        11434,
        "the LLM runtime's port on the VM, on 127.0.0.1 only (reached only through SSH)",
    ),
    "LLM_RELEASE_URL": Key(
        "an https or http URL of a .tar.zst (ollama) or .tar.gz (llamacpp)",
        None,
        "the LLM runtime's release archive from a mirror of yours, its sha256sum.txt beside it (empty: upstream's)",
    ),
    "PULL_OUTPUT": Key("true/false, yes/no, on/off or 1/0", True, "copy generated images here before stopping"),
    "KEEP_FLOATING_IP": Key("true/false, yes/no, on/off or 1/0", False, "keep the floating IP between rentals"),
    "PUSH_FOLDERS": Key(
        "comma-separated LOCAL=REMOTE pairs; LOCAL in the project, REMOTE on the data volume, no '..'",
        (("Models", "Models"), ("Wildcards", "Data/Wildcards"), ("workflows", "CustomWorkflows")),
        "what gpu-rent push copies to the VM",
    ),
    "OPERATOR_CIDR": Key(
        "auto, or an IP address or network such as 203.0.113.7/32",
        "auto",
        "who may reach SSH on the VM (auto: this machine's public address)",
    ),
    "SSH_USER": Key("lowercase a-z, 0-9, _ and -, not starting with a digit or -", "root", "SSH login user on the VM"),
    "PRICE_PER_HOUR": Key("a number, 0 or more, e.g. 1.25", None, "price of the flavor per hour, for cost display"),
    "PRICE_FLOATING_IP_PER_HOUR": Key(
        "a number, 0 or more, e.g. 0.3", None, "price of a floating IP per hour, for what a stopped VM still costs"
    ),
    "PRICE_DISK_GB_PER_HOUR": Key(
        "a number, 0 or more, e.g. 0.02", None, "price of one GB of network disk per hour, for the same"
    ),
    "NAME": Key("a lowercase letter, then up to 30 of a-z, 0-9 and -", "gpu-rent", "prefix of every cloud resource"),
    "EXTERNAL_NETWORK": Key("text", None, "network for the floating IP (empty: the cloud's only external one)"),
    "SUBNET_CIDR": Key("an IPv4 network of /29 or larger, e.g. 192.168.77.0/24", "192.168.77.0/24", "private subnet"),
    "SWARMUI_REPO": Key("text", "https://github.com/mcmonkeyprojects/SwarmUI.git", "git URL SwarmUI is cloned from"),
    "SWARMUI_VERSION": Key(
        f"a branch, tag or commit; {swarmui_versions.MINIMUM_LABEL} or newer",
        swarmui_versions.PINNED,
        f"branch, tag or commit of SwarmUI; the default is {swarmui_versions.PINNED_LABEL}, checked with gpu-rent",
    ),
    "REQUIRE_GPU": Key("true/false, yes/no, on/off or 1/0", True, "refuse to continue when the VM shows no GPU"),
}


class _Bad(ValueError):
    """A parser's complaint, e.g. "is not a whole number"; the loader adds file, line, key and Key.kind."""


def _text(raw: str) -> str:
    return raw


def _list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        # int() alone would also take "1_000" and non-ASCII digits; a settings file should not.
        if not re.fullmatch(r"[+-]?[0-9]+", raw):
            raise _Bad("is not a whole number")
        # more digits than high has is out of range, and int() refuses over 4300 (a ValueError, not a range)
        if len(raw.lstrip("+-").lstrip("0")) > len(str(high)):
            raise _Bad("is out of range")
        value = int(raw)
        if value < low or value > high:
            raise _Bad("is out of range")
        return value

    return parse


_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _bool(raw: str) -> bool:
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise _Bad("is not a yes/no value")


def _off_or(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """ "off" switches a signal off (None); anything else is parse's."""

    def parse_or_off(raw: str) -> Any:
        return None if raw.lower() == "off" else parse(raw)

    return parse_or_off


def _price(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _Bad("is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise _Bad("is out of range")
    return value


def _operator_cidr(raw: str) -> str:
    if raw.lower() == "auto":
        return "auto"
    try:
        # strict=False: "203.0.113.7/24" means "my /24", and a bare address becomes /32 or /128.
        return str(ipaddress.ip_network(raw, strict=False))
    except ValueError:
        raise _Bad("is not an IP network") from None


def _subnet_cidr(raw: str) -> str:
    try:
        network = ipaddress.ip_network(raw, strict=False)
    except ValueError:
        raise _Bad("is not an IPv4 network") from None
    if network.version != 4:
        raise _Bad("is not an IPv4 network")
    # A /30 leaves no address for the VM once the router and DHCP port have theirs.
    if network.prefixlen > 29:
        raise _Bad("is too small")
    return str(network)


def _matching(pattern: str, problem: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if not re.fullmatch(pattern, raw):
            raise _Bad(problem)
        return raw

    return parse


def _push_folders(raw: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in _list(raw):
        local, eq, remote = (part.strip() for part in item.partition("="))
        if not eq or not local or not remote:
            raise _Bad(f"has {item!r}, not LOCAL=REMOTE")
        parts = remote.replace("\\", "/").split("/")
        if remote.startswith("/") or ".." in parts or ".." in local.replace("\\", "/").split("/"):
            raise _Bad(f"has {item!r}: REMOTE is a folder on the data volume, relative, and neither side has '..'")
        pairs.append((local, "/".join(p for p in parts if p not in ("", "."))))
    return tuple(pairs)


_PARSERS: dict[str, Callable[[str], Any]] = {
    "POOL": _text,
    "POOL_FALLBACK": _list,
    "FLAVOR": _text,
    "FLAVOR_FALLBACK": _list,
    "IMAGE": _text,
    "VOLUME_TYPE": _matching(r"[^{}]*(\{pool\}[^{}]*)*", "may hold no braces but {pool}"),
    "BOOT_VOLUME_GB": _whole(1, MAX_VOLUME_GB),
    "DATA_VOLUME_GB": _whole(1, MAX_VOLUME_GB),
    "IDLE_MINUTES": _whole(1, MAX_MINUTES),
    "IDLE_GRACE_MINUTES": _whole(0, MAX_MINUTES),
    "IDLE_GPU_PERCENT": _off_or(_whole(0, 100)),
    "IDLE_HUNG_MINUTES": _off_or(_whole(1, MAX_MINUTES)),
    "IDLE_SHELL": _bool,
    "IDLE_LLM": _bool,
    "KEEP_ALIVE_COMMAND": _text,
    "BILLING_HOUR": _matching(r"off|clock|rental", "is none of off, clock, rental"),
    "LOCAL_PORT": _whole(1, 65535),
    "REMOTE_PORT": _whole(1, 65535),
    "LLM_RUNTIME": _matching(r"none|ollama|llamacpp", "is none of none, ollama, llamacpp"),
    "LLM_LOCAL_PORT": _whole(1, 65535),
    "LLM_REMOTE_PORT": _whole(1, 65535),
    # no user:secret@ in it: the URL shows in the playbook's output and in the VM's install stamp
    "LLM_RELEASE_URL": _matching(
        r"https?://[^\s/@]+/\S*\.tar\.(zst|gz)",
        "is not an https or http URL of a .tar.zst or .tar.gz (and no user@ in it)",
    ),
    "PULL_OUTPUT": _bool,
    "KEEP_FLOATING_IP": _bool,
    "PUSH_FOLDERS": _push_folders,
    "OPERATOR_CIDR": _operator_cidr,
    "SSH_USER": _matching(r"[a-z_][a-z0-9_-]*", "is not a valid user name"),
    "PRICE_PER_HOUR": _price,
    "PRICE_FLOATING_IP_PER_HOUR": _price,
    "PRICE_DISK_GB_PER_HOUR": _price,
    "NAME": _matching(r"[a-z][a-z0-9-]{0,30}", "is not a valid name"),
    "EXTERNAL_NETWORK": _text,
    "SUBNET_CIDR": _subnet_cidr,
    "SWARMUI_REPO": _text,
    "SWARMUI_VERSION": _text,
    "REQUIRE_GPU": _bool,
}
assert _PARSERS.keys() == KEYS.keys()


# --- gpu-rent.vars --------------------------------------------------------------------------------------------------


def _unquote(key: str, value: str, line: int) -> str:
    if value[:1] in ("'", '"'):
        if len(value) < 2 or value[-1] != value[0]:
            raise ConfigError(VARS_FILE, f"{key}={value} has an unmatched quote", line=line, key=key)
        return value[1:-1]
    return value


def _unknown_key(key: str, line: int) -> ConfigError:
    close = difflib.get_close_matches(key.upper(), KEYS, n=1)
    hint = f"did you mean {close[0]}?" if close else "known keys: " + ", ".join(KEYS)
    return ConfigError(VARS_FILE, f"unknown key {key} ({hint})", line=line, key=key)


def _read_lines(text: str) -> dict[str, tuple[str, int]]:
    """KEY -> (unquoted value, line number); only the file's shape is checked here, not the values."""
    found: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "=" not in stripped:
            shown = stripped if len(stripped) <= 40 else stripped[:37] + "..."
            raise ConfigError(VARS_FILE, f"line {shown!r} has no '=' (expected KEY=VALUE)", line=number)
        key, _, value = (part.strip() for part in stripped.partition("="))
        if not key:
            raise ConfigError(VARS_FILE, "line has no key before '=' (expected KEY=VALUE)", line=number)
        if _has_control(key):  # not shown: an ESC would rewrite the terminal the message is printed on
            raise ConfigError(
                VARS_FILE, "line holds a control character before its '=' (expected KEY=VALUE)", line=number
            )
        if key not in KEYS:
            raise _unknown_key(key, number)
        if key in found:
            first = found[key][1]
            raise ConfigError(VARS_FILE, f"{key} is given twice (lines {first} and {number})", line=number, key=key)
        if _has_control(value):  # as setup --set refuses it: a NUL or ESC in a name would go on to the cloud
            raise ConfigError(VARS_FILE, _control_problem(key), line=number, key=key)
        found[key] = (_unquote(key, value, number), number)
    return found


def _has_control(text: str) -> bool:
    """A control character (C0, DEL or C1: NUL, ESC, a line break...): no setting holds one, a terminal obeys it."""
    return any(unicodedata.category(c) == "Cc" for c in text)


def _control_problem(key: str) -> str:
    return f"{key}: the value holds a line break or another control character"


def value_problem(key: str, raw: str) -> str | None:
    """What is wrong with `KEY=raw` as a line of gpu-rent.vars would be read (None: nothing), for values given
    elsewhere (gpu-rent setup --set): quotes as the file has them; an empty value is the default, so only a required
    key refuses it. A line break or other control character would write a line of its own: refused."""
    key = key.upper()
    if key not in KEYS:
        return _unknown_key(key, 0).message
    if _has_control(raw):
        return _control_problem(key)
    spec = KEYS[key]
    try:
        value = _unquote(key, raw, 0)
    except ConfigError as e:
        return e.message
    if value == "":
        return f"{key} is required ({spec.meaning})" if spec.default is REQUIRED else None
    try:
        _PARSERS[key](value)
    except _Bad as bad:
        return f"{key}={masked(value)} {bad} ({spec.kind})"
    return None


def check_vars_text(text: str) -> None:
    """ConfigError when `text` would not load as gpu-rent.vars (every key, and the keys against each other):
    what setup is about to write is checked before it is written."""
    _values_of(_read_lines(text))


def read_vars(project_dir: Path) -> dict[str, Any]:
    try:
        text = text_file.read(project_dir / VARS_FILE)
    except text_file.Unreadable as e:
        raise ConfigError(VARS_FILE, e.problem, line=e.line) from None
    if text is None:
        hint = "run gpu-rent in a project folder, or pass --project"
        raise ConfigError(VARS_FILE, f"not found in {project_dir} ({hint})")
    return _values_of(_read_lines(text))


def _values_of(found: dict[str, tuple[str, int]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, spec in KEYS.items():
        raw, line = found.get(key, ("", None))
        # An empty value means "the default", so a template can list every key with nothing filled in.
        if raw == "":
            if spec.default is REQUIRED:
                raise ConfigError(VARS_FILE, f"{key} is required ({spec.meaning})", line=line, key=key)
            values[key] = spec.default
            continue
        try:
            values[key] = _PARSERS[key](raw)
        except _Bad as bad:
            raise ConfigError(VARS_FILE, f"{key}={masked(raw)} {bad} ({spec.kind})", line=line, key=key) from None
    _ports_apart(values, found)
    _release_fits(values, found)
    return values


# each runtime's release archive as upstream publishes it: Ollama's .tar.zst, llama.cpp's .tar.gz
_RELEASE_SUFFIX = {"ollama": ".tar.zst", "llamacpp": ".tar.gz"}


def _release_fits(values: dict[str, Any], found: dict[str, tuple[str, int]]) -> None:
    url, runtime = values["LLM_RELEASE_URL"], values["LLM_RUNTIME"]
    if url is None or runtime not in _RELEASE_SUFFIX or url.endswith(_RELEASE_SUFFIX[runtime]):
        return
    raise ConfigError(
        VARS_FILE,
        f"LLM_RELEASE_URL={masked(url)} is not a {_RELEASE_SUFFIX[runtime]}: LLM_RUNTIME={runtime}'s release is one",
        line=found["LLM_RELEASE_URL"][1] if "LLM_RELEASE_URL" in found else None,
        key="LLM_RELEASE_URL",
    )


# each LLM port against SwarmUI's on the same side of the tunnel: one port cannot forward, or serve, both
_PORT_PAIRS = (("LLM_LOCAL_PORT", "LOCAL_PORT", "this machine"), ("LLM_REMOTE_PORT", "REMOTE_PORT", "the VM"))


def _ports_apart(values: dict[str, Any], found: dict[str, tuple[str, int]]) -> None:
    if values["LLM_RUNTIME"] == "none":  # no runtime: its ports are used by nothing
        return
    for llm_key, swarm_key, side in _PORT_PAIRS:
        if values[llm_key] == values[swarm_key]:
            # named by the key the file sets (the LLM one when both): the other may be its default
            key, other = (swarm_key, llm_key) if llm_key not in found and swarm_key in found else (llm_key, swarm_key)
            raise ConfigError(
                VARS_FILE,
                f"{key}={values[key]} is {other} too: SwarmUI and the LLM runtime need a port each on {side}",
                line=found[key][1] if key in found else None,
                key=key,
            )
