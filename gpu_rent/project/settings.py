"""A project's configuration: `gpu-rent.vars` (settings) and `.env` (secrets, cloud auth) as one frozen object.

Every problem becomes one `ConfigError` line naming the file, the line when known, and the key, so the CLI can
print it and exit 2 before anything in the cloud is touched (SPEC §3).

One file of ~980 lines on purpose: every key's parser, default and message sit beside the one loader that
applies them, so a key is read, checked and explained in one place (the vars plugin and the CLI share it).
"""

from __future__ import annotations

import difflib
import io
import ipaddress
import json
import math
import os
import re
import socket
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlparse

import yaml
from dotenv import dotenv_values
from dotenv.parser import parse_stream

from gpu_rent.project import llm_models, seed_list, swarmui_versions, text_file, yaml_loader
from gpu_rent.project.errors import ConfigError

if TYPE_CHECKING:
    import openstack.config
    import openstack.connection
    from openstack.config.cloud_region import CloudRegion

VARS_FILE = "gpu-rent.vars"
ENV_FILE = ".env"
RUNTIME_DIR = ".gpu-rent"
DEFAULT_SSH_KEY = "~/.ssh/id_ed25519"
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
        f"minutes, 0..{MAX_MINUTES} (ten years)", 45, "extra idle allowance right after start-up"
    ),
    "IDLE_GPU_PERCENT": Key(
        "a whole number 0..100, or off", 10, "a GPU busier than this (%) is work that keeps the VM; off: not looked at"
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


def masked(text: str) -> str:
    """text as an output line may show it: a URL's user:secret@ never (the line may be logged), but ***@. Up to the
    last @ before a space or the end: a password may hold @ or /, and to hide a host too is the lesser harm."""
    return re.sub(r"(://)\S*@", r"\1***@", text)


def check_vars_text(text: str) -> None:
    """ConfigError when `text` would not load as gpu-rent.vars (every key, and the keys against each other):
    what setup is about to write is checked before it is written."""
    _values_of(_read_lines(text))


def _read_vars(project_dir: Path) -> dict[str, Any]:
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


# --- .env and cloud auth ---------------------------------------------------------------------------------------------

ENV_KEYS = ("GPU_RENT_SSH_KEY", "CIVITAI_TOKEN")
# Selectors that pick a clouds.yaml entry rather than being auth values themselves.
_CLOUD_SELECTORS = {"OS_CLOUD", "OS_CLOUD_NAME", "OS_CLIENT_CONFIG_FILE", "OS_CLIENT_SECURE_FILE"}
# With OS_CLOUD, clouds.yaml is the whole truth except these: a shell that still has another project's openrc
# sourced must not silently redirect this project to that project's endpoint or user.
_CLOUD_OVERRIDES = {"OS_REGION_NAME": "region_name", "OS_INTERFACE": "interface"}


def _read_env(project_dir: Path) -> dict[str, str] | None:
    """The .env file's values, or None when there is no .env; nothing is put into os.environ."""
    try:
        text = text_file.read(project_dir / ENV_FILE)
    except text_file.Unreadable as e:
        raise ConfigError(ENV_FILE, e.problem, line=e.line) from None
    if text is None:
        return None
    # python-dotenv skips a line it cannot parse (an unmatched quote, a stray word) with a warning of its own:
    # the command would go on without that value, so it is refused here, like a bad line in gpu-rent.vars.
    first_line: dict[str, int] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = _first_line_of(binding.original)
        if binding.error:
            raise _unreadable_env_line(binding.original.string, line)
        if binding.key is None:
            continue
        _check_env_key(binding.key, binding.value, line)
        if binding.key in first_line:  # the last would win silently: which password is meant is not ours to guess
            raise ConfigError(
                ENV_FILE,
                f"{binding.key} is given twice (lines {first_line[binding.key]} and {line})",
                line=line,
                key=binding.key,
            )
        first_line[binding.key] = line
    # interpolate=False: a password containing "${" must arrive as written.
    raw = dotenv_values(stream=io.StringIO(text), interpolate=False)
    values: dict[str, str] = {}
    for key, value in raw.items():
        # Empty means unset; otherwise kept exactly, since a quoted password may well start with a space.
        if value is not None and value.strip():
            values[key] = value
    return values


# What a .env key may be shown as: a name as environment variables have them, upper case (every key .env takes
# is). A token pasted on a line of its own (civitai_8f3e..., base64, hex) is lower or mixed case, and python-dotenv
# takes it for a key: a key of any other shape is not shown, lest the secret be printed as "unknown key <secret>".
_ENV_KEY_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_ENV_KEYS_ALLOWED = "allowed: OS_* cloud auth, GPU_RENT_SSH_KEY, CIVITAI_TOKEN"
_NOT_KEY_VALUE = "line is not KEY=VALUE (its text is not shown: .env holds secrets)"


def _check_env_key(key: str, value: str | None, line: int) -> None:
    allowed = bool(_ENV_KEY_NAME.fullmatch(key)) and (key.startswith("OS_") or key in ENV_KEYS)
    if value is None and allowed:
        raise ConfigError(ENV_FILE, f"{key} has no value (expected {key}=VALUE)", line=line, key=key)
    if value is None:  # a word alone on its line (no '='): the likeliest a pasted secret, never shown
        raise ConfigError(ENV_FILE, _NOT_KEY_VALUE, line=line)
    if allowed:
        return
    if _ENV_KEY_NAME.fullmatch(key):
        raise ConfigError(ENV_FILE, f"unknown key {key} ({_ENV_KEYS_ALLOWED})", line=line, key=key)
    raise ConfigError(
        ENV_FILE,
        f"unknown key, not shown as it is no upper-case name (.env holds secrets; {_ENV_KEYS_ALLOWED})",
        line=line,
    )


def _first_line_of(original) -> int:
    """The line a python-dotenv binding's text starts on: its `line` counts the blank lines before it too."""
    text = original.string
    return original.line + text[: len(text) - len(text.lstrip())].count("\n")


def _unreadable_env_line(original: str, line: int) -> ConfigError:
    # .env holds secrets: the message names the key at most, never the value.
    match = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=", original)
    if match and _ENV_KEY_NAME.fullmatch(match[1]):
        key = match[1]
        return ConfigError(
            ENV_FILE, f"{key}= has a value that cannot be read (an unmatched quote?)", line=line, key=key
        )
    return ConfigError(ENV_FILE, _NOT_KEY_VALUE, line=line)


def _merged_env(file_env: dict[str, str] | None, environ: Mapping[str, str]) -> dict[str, str]:
    """OS_*, GPU_RENT_SSH_KEY and CIVITAI_TOKEN from the process environment, overridden by .env."""
    wanted = {k: v for k, v in environ.items() if (k.startswith("OS_") or k in ENV_KEYS) and v.strip()}
    if file_env is None:
        if "OS_CLOUD" not in wanted and "OS_AUTH_URL" not in wanted:
            raise ConfigError(
                ENV_FILE,
                "not found, and the environment has no OS_CLOUD or OS_AUTH_URL "
                "(create .env with OS_CLOUD=<cloud in clouds.yaml>, or OS_AUTH_URL and the other OS_* variables)",
            )
        return wanted
    # .env picks the kind of auth: a stray OS_CLOUD in the shell must not turn an OS_AUTH_URL .env into a
    # clouds.yaml lookup.
    if "OS_AUTH_URL" in file_env and "OS_CLOUD" not in file_env:
        wanted.pop("OS_CLOUD", None)
    return {**wanted, **file_env}


def _config_errors() -> tuple[type[Exception], ...]:
    """What resolving a cloud configuration raises for a bad entry (e.g. an unknown auth_type)."""
    import openstack.exceptions
    from keystoneauth1 import exceptions as ksa_exceptions

    return (openstack.exceptions.SDKException, ksa_exceptions.ClientException)


@dataclass(frozen=True)
class CloudAuth:
    """What is needed to reach the cloud: a clouds.yaml entry, or OS_* values given directly."""

    cloud: str | None = None
    config_file: Path | None = None
    # keyword arguments for OpenStackConfig.get_one(); holds the password, so never shown.
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        if self.cloud:
            file = str(self.config_file) if self.config_file else None
            return f"CloudAuth(cloud={self.cloud!r}, config_file={file!r})"
        return f"CloudAuth(auth_url={masked(str(dict(self.options).get('auth_url')))!r})"

    def openstack_config(self) -> openstack.config.OpenStackConfig:
        # imported here: the vars plugin loads this module in every ansible-playbook the CLI starts, and
        # there (the CLI hands the resolved auth over) openstacksdk's import was 0.25 s of its start-up
        import openstack.config

        # load_envvars=False: only what load() resolved counts, not whatever the shell happens to export.
        if self.cloud:
            files = [str(self.config_file)] if self.config_file else None
            return openstack.config.OpenStackConfig(config_files=files, load_envvars=False, app_name="gpu-rent")
        return openstack.config.OpenStackConfig(load_yaml_config=False, load_envvars=False, app_name="gpu-rent")

    def region(self) -> CloudRegion:
        """The resolved cloud configuration (no network)."""
        config = self.openstack_config()
        if self.cloud:
            return config.get_one(self.cloud, **dict(self.options))
        return config.get_one(**dict(self.options))

    def connect(self) -> openstack.connection.Connection:
        import openstack.connection

        return openstack.connection.Connection(config=self.region())

    def ansible_params(self) -> dict[str, Any]:
        """The openstack.cloud modules' auth, auth_type, region_name and interface parameters."""
        region = self.region()
        # Everything openstacksdk resolved goes to Ansible (which uses openstacksdk too), so clouds.yaml entries
        # with e.g. project_domain_id work there exactly as they do here.
        auth = {k: v for k, v in region.config["auth"].items() if v not in (None, "")}
        params = {
            "auth": auth,
            "auth_type": region.config.get("auth_type"),
            "region_name": region.region_name,
            "interface": region.config.get("interface"),
        }
        return {k: v for k, v in params.items() if v not in (None, "")}

    def describe(self) -> str:
        """Short human text, e.g. `cloud "ground" (http://127.0.0.1:5000/v3), project gpu-rent`."""
        auth = self.region().config["auth"]
        head = f'cloud "{self.cloud}"' if self.cloud else "OS_AUTH_URL"
        text = f"{head} ({masked(str(auth.get('auth_url')))})"  # a URL may carry user:password@
        project = auth.get("project_name") or auth.get("project_id")
        return f"{text}, project {project}" if project else text


def _source(key: str, file_env: dict[str, str] | None) -> str:
    return ENV_FILE if file_env is not None and key in file_env else "environment"


# (auth, project_dir) -> openstacksdk resolved this very auth before, and nothing it reads has changed since
KnownCloud = Callable[[CloudAuth, Path], bool]


def _cloud_auth(
    env: dict[str, str], file_env: dict[str, str] | None, project_dir: Path, known: KnownCloud | None = None
) -> CloudAuth:
    if env.get("OS_CLOUD"):
        return _named_cloud(env, file_env, project_dir, known)
    if env.get("OS_AUTH_URL"):
        options = {k[3:].lower(): v for k, v in env.items() if k.startswith("OS_") and k not in _CLOUD_SELECTORS}
        auth = CloudAuth(options=tuple(sorted(options.items())))
        if known is not None and known(auth, project_dir):
            return auth
        try:
            auth.region()
        except _config_errors() as exc:
            said = masked(" ".join(str(exc).split()))  # openstacksdk's errors quote the auth URL
            raise ConfigError(_source("OS_AUTH_URL", file_env), f"OS_* cloud auth: {said}", key="OS_AUTH_URL") from None
        return auth
    raise ConfigError(
        ENV_FILE,
        "no cloud auth: set OS_CLOUD (with clouds.yaml) or OS_AUTH_URL and the other OS_* variables",
        key="OS_CLOUD",
    )


def _named_cloud(
    env: dict[str, str], file_env: dict[str, str] | None, project_dir: Path, known: KnownCloud | None = None
) -> CloudAuth:
    name = env["OS_CLOUD"]
    config_file = None
    if env.get("OS_CLIENT_CONFIG_FILE"):
        given = env["OS_CLIENT_CONFIG_FILE"]
        config_file = project_dir / Path(given).expanduser()
        if not config_file.is_file():
            raise ConfigError(
                _source("OS_CLIENT_CONFIG_FILE", file_env),
                f"OS_CLIENT_CONFIG_FILE={given}: {config_file} not found (the clouds.yaml that defines OS_CLOUD)",
                key="OS_CLIENT_CONFIG_FILE",
            )
    overrides = {option: env[var] for var, option in _CLOUD_OVERRIDES.items() if env.get(var)}
    auth = CloudAuth(cloud=name, config_file=config_file, options=tuple(sorted(overrides.items())))
    if known is not None and known(auth, project_dir):
        return auth
    if config_file is not None:
        _check_clouds_file(config_file, name)
    where = _source("OS_CLOUD", file_env)
    try:
        config = auth.openstack_config()
    except Exception as exc:  # a malformed clouds.yaml surfaces as YAML, JSON or OS errors
        said = masked(" ".join(str(exc).split()))
        raise ConfigError(where, f"OS_CLOUD={name}: cannot read clouds.yaml: {said}", key="OS_CLOUD") from None
    if name not in config.get_cloud_names():
        read = config.config_filename or "any clouds.yaml"
        known = ", ".join(sorted(config.get_cloud_names())) or "none"
        raise ConfigError(where, f"OS_CLOUD={name} is not in {read} (clouds there: {known})", key="OS_CLOUD")
    try:
        auth.region()
    except _config_errors() as exc:
        raise ConfigError(where, f"OS_CLOUD={name}: {masked(' '.join(str(exc).split()))}", key="OS_CLOUD") from None
    return auth


def _check_clouds_file(path: Path, name: str) -> None:
    """ConfigError when the clouds.yaml OS_CLIENT_CONFIG_FILE names cannot be parsed, or has not the shape openstacksdk
    reads: openstacksdk skips a file it cannot parse (a log warning) and then says OS_CLOUD is in no clouds.yaml,
    and a wrong shape (clouds: 5) ends in a TypeError. Everything else is left to openstacksdk's own resolution."""
    try:
        text = text_file.read(path)
    except text_file.Unreadable as e:
        raise ConfigError(str(path), e.problem, line=e.line, key="OS_CLIENT_CONFIG_FILE") from None
    try:  # as openstacksdk's loader reads it: JSON by the name's end, else YAML
        data = json.loads(text) if str(path).endswith("json") else yaml.load(text, Loader=yaml_loader.SafeLoader)
    except json.JSONDecodeError as e:
        raise ConfigError(
            str(path), f"is not readable JSON: {e.msg}", line=e.lineno, key="OS_CLIENT_CONFIG_FILE"
        ) from None
    except ValueError as e:  # JSON's int() guard: a number of more than 4300 digits
        said = str(e).split(";")[0]
        raise ConfigError(str(path), f"is not readable JSON: {said}", key="OS_CLIENT_CONFIG_FILE") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        said = _yaml_said(e) if isinstance(e, yaml.MarkedYAMLError) else type(e).__name__
        line = mark.line + 1 if mark else None
        raise ConfigError(str(path), f"is not readable YAML: {said}", line=line, key="OS_CLIENT_CONFIG_FILE") from None
    shape = None if data is None else _clouds_shape_problem(data, name)  # empty: openstacksdk finds no cloud there
    if shape:
        problem, keys = shape
        raise ConfigError(str(path), problem, line=_yaml_line(text, keys), key="OS_CLIENT_CONFIG_FILE")


def _clouds_shape_problem(data: Any, name: str) -> tuple[str, tuple[str, ...]] | None:
    """What in a parsed clouds.yaml is not the mapping openstacksdk indexes, down to OS_CLOUD's auth, and the keys
    that lead to it; None when nothing is."""
    if not isinstance(data, dict):
        return "is not a mapping with clouds: (clouds: <name>: <settings>)", ()
    clouds = data.get("clouds", {})
    if not isinstance(clouds, dict):
        return "clouds: is not a mapping of cloud names to their settings", ("clouds",)
    entry = clouds.get(name, {})
    if not isinstance(entry, dict):
        return f"clouds: {name}: is not a mapping of settings (auth:, region_name: ...)", ("clouds", name)
    if not isinstance(entry.get("auth", {}), dict):
        return f"clouds: {name}: auth: is not a mapping (auth_url:, username: ...)", ("clouds", name, "auth")
    return None


def _yaml_line(text: str, keys: tuple[str, ...]) -> int | None:
    """The line of the value that keys lead to in YAML (or JSON) text, as far as they lead; None if it won't parse."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        node = next((value for k, value in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), node)
    return node.start_mark.line + 1 if node is not None else None


def _yaml_said(e: yaml.MarkedYAMLError) -> str:
    """PyYAML's words without what it quotes of the file: a password written unquoted is an alias or a tag to YAML
    (`password: *x9`, `password: !x9`) that its error quotes whole. A quoted character or '<token>' stays."""
    said = " ".join(filter(None, (e.context, e.problem)))
    kept = re.compile(r"<[a-z ]+>|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\?.")
    return re.sub(r"'([^']*)'", lambda m: m[0] if kept.fullmatch(m[1]) else "'...'", said)


def _ssh_key(env: dict[str, str], project_dir: Path) -> Path:
    # Relative paths are relative to the project, not to wherever gpu-rent happens to be started from.
    return project_dir / Path(env.get("GPU_RENT_SSH_KEY", DEFAULT_SSH_KEY)).expanduser()


# --- the settings object ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    project_dir: Path
    pool: str
    pool_fallback: tuple[str, ...]
    flavor: str
    flavor_fallback: tuple[str, ...]
    image: str
    volume_type: str | None
    boot_volume_gb: int
    data_volume_gb: int
    idle_minutes: int
    idle_grace_minutes: int
    idle_gpu_percent: int | None
    idle_shell: bool
    idle_llm: bool
    keep_alive_command: str | None
    billing_hour: str
    local_port: int
    remote_port: int
    llm_runtime: str
    llm_local_port: int
    llm_remote_port: int
    llm_release_url: str | None
    pull_output: bool
    keep_floating_ip: bool
    push_folders: tuple[tuple[str, str], ...]
    operator_cidr: str
    ssh_user: str
    price_per_hour: float | None
    price_floating_ip_per_hour: float | None
    price_disk_gb_per_hour: float | None
    name: str
    external_network: str | None
    subnet_cidr: str
    swarmui_repo: str
    swarmui_version: str
    require_gpu: bool
    ssh_key: Path
    cloud: CloudAuth | None  # None only for load(with_cloud=False), where the caller brings the auth
    civitai_token: str | None = field(default=None, repr=False)
    # seed.yml, checked: {"extensions": [...], "autocomplete": [...], "models": [...]}
    seed: dict = field(default_factory=lambda: {"extensions": [], "autocomplete": [], "models": []}, hash=False)
    # ollama-models.yaml, checked: LLM_RUNTIME's own part (llm_models.load); empty with LLM_RUNTIME=none
    llm_models: list = field(default_factory=list, hash=False)

    @property
    def runtime_dir(self) -> Path:
        return self.project_dir / RUNTIME_DIR

    def flavors(self) -> tuple[str, ...]:
        """FLAVOR, then FLAVOR_FALLBACK, each once, in order of preference."""
        return tuple(dict.fromkeys((self.flavor, *self.flavor_fallback)))

    def pools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.pool, *self.pool_fallback)))

    def ssh_public_key(self) -> str:
        """The public half of the SSH key; checked only here so that e.g. `status` works without a key."""
        key = self.ssh_key
        public = key.with_name(key.name + ".pub")
        prefix = f"GPU_RENT_SSH_KEY={key}"
        try:
            text = text_file.read(public)
        except text_file.Unreadable as e:  # one line of ASCII when it is a key: a line number would add nothing
            raise ConfigError(ENV_FILE, f"{prefix}: {public} {e.problem}") from None
        # An agent-held key (no private file here) is fine as long as the .pub is present.
        if text is not None:
            text = text.strip()
            if not text:
                raise ConfigError(ENV_FILE, f"{prefix}: {public} is empty (ssh-keygen -y -f {key} > {public})")
            return text
        if key.is_file():
            raise ConfigError(ENV_FILE, f"{prefix}: {public} not found (ssh-keygen -y -f {key} > {public})")
        raise ConfigError(ENV_FILE, f"{prefix}: {key} not found (ssh-keygen -t ed25519 -f {key})")

    def ansible_vars(self) -> dict[str, Any]:
        """Every setting as `gpu_rent_<field>`, in types YAML/JSON can carry."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "cloud":
                if value is not None:
                    out["gpu_rent_cloud_auth"] = value.ansible_params()
                continue
            if f.name == "seed":  # one variable per part, as the seed role reads them
                for part, items in value.items():
                    out[f"gpu_rent_seed_{part}"] = items
                continue
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Path):
                value = str(value)
            out[f"gpu_rent_{f.name}"] = value
        try:
            out["gpu_rent_ssh_public_key"] = self.ssh_public_key()
        except ConfigError:
            # Playbooks that need the key check for None; read-only ones must not fail over it.
            out["gpu_rent_ssh_public_key"] = None
        out["gpu_rent_flavors"] = list(self.flavors())
        out["gpu_rent_pools"] = list(self.pools())
        out["gpu_rent_runtime_dir"] = str(self.runtime_dir)
        out["gpu_rent_names"] = resource_names(self.name)
        return out

    def resolved_operator_cidr(self) -> str:
        """OPERATOR_CIDR, with "auto" resolved to the address this machine reaches the cloud from. Every address
        is refused here, for up, as the security_group role refuses it but before up's head start may create the
        server; not by the loader, so that stop and status still work in a project that says it."""
        if self.operator_cidr != "auto":
            if ipaddress.ip_network(self.operator_cidr).prefixlen == 0:
                raise ConfigError(
                    VARS_FILE,
                    f"OPERATOR_CIDR={self.operator_cidr} is every address: SSH open to the world is refused "
                    "(auto, or your address such as 203.0.113.7/32)",
                    key="OPERATOR_CIDR",
                )
            return self.operator_cidr
        if self.cloud is None:
            raise ConfigError(VARS_FILE, "OPERATOR_CIDR=auto needs the cloud's address; set OPERATOR_CIDR")
        return auto_operator_cidr(url_host(str(self.cloud.region().config["auth"].get("auth_url", ""))))


# --- OPERATOR_CIDR=auto: here for up and the vars plugin, and for setup, which settles OPERATOR_CIDR with it --------


def url_host(url: str) -> str:
    return urlparse(url).hostname or ""


def route_to(host: str) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    """This machine's address on its route to host, and host's address; OSError when there is no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 443))  # UDP: nothing is sent, the kernel only picks the route
        return ipaddress.ip_address(s.getsockname()[0]), ipaddress.ip_address(s.getpeername()[0])


def auto_operator_cidr(host: str, route: Callable[[str], tuple] | None = None) -> str:
    """OPERATOR_CIDR=auto resolved: the address this machine reaches host (the cloud's Keystone) from, when public.

    route: route_to unless given (tests); looked up when called, so one stand-in serves config and setup alike.
    """
    try:
        address = (route or route_to)(host)[0]
    except OSError as e:
        raise ConfigError(VARS_FILE, f"OPERATOR_CIDR=auto: no route to {host} ({e}); set OPERATOR_CIDR") from None
    if not address.is_global:
        raise ConfigError(
            VARS_FILE,
            f"OPERATOR_CIDR=auto: this machine reaches the cloud from {address}, a private address (NAT): "
            "set OPERATOR_CIDR to your public address, e.g. OPERATOR_CIDR=203.0.113.7/32",
            key="OPERATOR_CIDR",
        )
    return f"{address}/32"


def resource_names(prefix: str) -> dict[str, str]:
    """Every cloud resource's name, from NAME: the one place roles, status and dry-run take them from."""
    return {
        "server": prefix,
        "boot_volume": f"{prefix}-boot",
        "data_volume": f"{prefix}-data",
        "floating_ip_description": f"gpu-rent {prefix}",
        "keypair": f"{prefix}-key",
        "security_group": f"{prefix}-ssh",
        "snapshot": f"{prefix}-boot-ok",
        "idle_killer_credential": f"{prefix}-idle-killer",
        "network_prefix": f"{prefix}-net-",
        "subnet_prefix": f"{prefix}-subnet-",
        "router_prefix": f"{prefix}-router-",
    }


def load(project_dir: Path, *, with_cloud: bool = True, known_cloud: KnownCloud | None = None) -> Settings:
    """Read and check `<project_dir>/gpu-rent.vars` and `.env`; raise ConfigError on the first problem.

    with_cloud=False skips resolving the cloud auth: the vars plugin gets it from the CLI's auth file.
    known_cloud(auth, project_dir) true: openstacksdk resolved this very auth before, from files unchanged since
    (status's kept route, cloud_route.fits), so it is not loaded to check it again.
    """
    project_dir = Path(project_dir).expanduser().resolve()
    values = _read_vars(project_dir)
    try:
        models = llm_models.load(project_dir, values["LLM_RUNTIME"])
    except llm_models.ModelsFileError as e:
        raise ConfigError(e.file, e.message, line=e.line) from None
    file_env = _read_env(project_dir)
    if with_cloud:
        env = _merged_env(file_env, os.environ)
        cloud = _cloud_auth(env, file_env, project_dir, known_cloud)
    else:
        env = {**{k: v for k, v in os.environ.items() if k in ENV_KEYS}, **(file_env or {})}
        cloud = None
    return Settings(
        project_dir=project_dir,
        **{key.lower(): value for key, value in values.items()},
        ssh_key=_ssh_key(env, project_dir),
        cloud=cloud,
        civitai_token=env.get("CIVITAI_TOKEN"),
        seed=seed_list.load(project_dir),
        llm_models=models,
    )
