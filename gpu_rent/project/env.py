"""`.env` and the cloud login it names: secrets, OS_* auth or a clouds.yaml entry, resolved without a network call."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from dotenv import dotenv_values
from dotenv.parser import parse_stream

from gpu_rent.project import text_file, yaml_loader
from gpu_rent.project.errors import ConfigError, masked

if TYPE_CHECKING:
    import openstack.config
    import openstack.connection
    from openstack.config.cloud_region import CloudRegion

ENV_FILE = ".env"
SHELL = "the shell"  # where the OS_* values come from when there is no .env: the process environment
DEFAULT_SSH_KEY = "~/.ssh/id_ed25519"
# --- .env and cloud auth ---------------------------------------------------------------------------------------------

ENV_KEYS = ("GPU_RENT_SSH_KEY", "CIVITAI_TOKEN")
# Selectors that pick a clouds.yaml entry rather than being auth values themselves.
_CLOUD_SELECTORS = {"OS_CLOUD", "OS_CLOUD_NAME", "OS_CLIENT_CONFIG_FILE", "OS_CLIENT_SECURE_FILE"}
# With OS_CLOUD, clouds.yaml is the whole truth except these: a shell that still has another project's openrc
# sourced must not silently redirect this project to that project's endpoint or user.
_CLOUD_OVERRIDES = {"OS_REGION_NAME": "region_name", "OS_INTERFACE": "interface"}
# The auth options that choose where a login lands, each part's in keystoneauth's order of precedence.
_SCOPING = {"project": ("project_id", "project_name"), "region": ("region_name",)}


def read_env(project_dir: Path) -> dict[str, str] | None:
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


def merged_env(file_env: dict[str, str] | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The OS_* values of .env, or of the process environment (the shell) where there is no .env; GPU_RENT_SSH_KEY
    and CIVITAI_TOKEN from the shell too, overridden by .env."""
    wanted = {k: v for k, v in environ.items() if (k.startswith("OS_") or k in ENV_KEYS) and v.strip()}
    if file_env is None:
        if "OS_CLOUD" not in wanted and "OS_AUTH_URL" not in wanted:
            raise ConfigError(
                ENV_FILE,
                "not found, and the environment has no OS_CLOUD or OS_AUTH_URL "
                "(create .env with OS_CLOUD=<cloud in clouds.yaml>, or OS_AUTH_URL and the other OS_* variables)",
            )
        return wanted
    # A .env is the whole login: filling its gaps from the shell let an openrc sourced for another project or
    # region (Selectel's rc.sh exports OS_PROJECT_ID and OS_REGION_NAME) send every command there, and status
    # then took this folder's resources for gone. None of the OS_* is kept, secrets included: OS_CLIENT_CONFIG_FILE
    # picks the clouds.yaml and so the project too, and the ground and setup put every value in .env. The SSH key
    # and the Civitai token choose no cloud.
    return {**{k: v for k, v in wanted.items() if k in ENV_KEYS}, **file_env}


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
    # where the OS_* values were read (.env, or the shell where there is no .env), their names, and the names of
    # the shell's OS_* values that count for nothing beside a .env: doctor says them, and a login refused for
    # reaching another project or region than the state's names the value that sent it there
    read_from: str = ENV_FILE
    given: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

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

    def origin(self, part: str) -> tuple[str, str]:
        """Where this login's project or region is set, as a one-line error starts: (the place, what it says):
        (".env", "OS_REGION_NAME=ru-3"), ("/p/clouds.yaml", 'entry "x"'), ("the shell", "no OS_REGION_NAME")."""
        options = dict(self.options)
        option = next((o for o in _SCOPING[part] if options.get(o)), None)
        if option:
            return self.read_from, f"OS_{option.upper()}={options[option]}"
        if self.cloud:
            return self._clouds_file(), f'entry "{self.cloud}"'
        return self.read_from, "no " + " or ".join(f"OS_{o.upper()}" for o in _SCOPING[part])

    def origins(self) -> str:
        """Where each OS_* value came from, in one line (doctor's)."""
        said = [f"{', '.join(self.given) or 'no OS_* value'} from {self.read_from}"]
        if self.cloud:
            said.append(f'the rest from clouds.yaml entry "{self.cloud}" ({self._clouds_file()})')
            overrides = [var for var, option in _CLOUD_OVERRIDES.items() if option in dict(self.options)]
            unused = [k for k in self.given if k not in {"OS_CLOUD", "OS_CLIENT_CONFIG_FILE", *overrides}]
            if unused:
                said.append(f"{', '.join(unused)} unused beside OS_CLOUD (its entry is the whole login)")
        if self.ignored:
            said.append(f"the shell's {', '.join(self.ignored)} ignored ({ENV_FILE} is the whole login)")
        return "; ".join(said)

    def _clouds_file(self) -> str:
        if self.config_file:
            return str(self.config_file)
        try:
            return self.openstack_config().config_filename or "clouds.yaml"
        except Exception:  # read before, when this auth was resolved; words only, never a reason to fail
            return "clouds.yaml"


# (auth, project_dir) -> openstacksdk resolved this very auth before, and nothing it reads has changed since
KnownCloud = Callable[[CloudAuth, Path], bool]


def cloud_auth(
    env: dict[str, str],
    file_env: dict[str, str] | None,
    project_dir: Path,
    known: KnownCloud | None = None,
    shell: Mapping[str, str] | None = None,
) -> CloudAuth:
    """The login env (merged_env's) names. shell: the process environment it was merged from, for the names of
    its OS_* values that did not count (doctor's line)."""
    shell_values = {k: v for k, v in (shell or {}).items() if k.startswith("OS_") and v.strip()}
    origin = {
        "read_from": SHELL if file_env is None else ENV_FILE,
        "given": tuple(sorted(k for k in env if k.startswith("OS_"))),
        "ignored": tuple(sorted(k for k, v in shell_values.items() if env.get(k) != v)),
    }
    if env.get("OS_CLOUD"):
        return _named_cloud(env, origin, project_dir, known)
    if env.get("OS_AUTH_URL"):
        options = {k[3:].lower(): v for k, v in env.items() if k.startswith("OS_") and k not in _CLOUD_SELECTORS}
        auth = CloudAuth(options=tuple(sorted(options.items())), **origin)
        if known is not None and known(auth, project_dir):
            return auth
        try:
            auth.region()
        except _config_errors() as exc:
            said = masked(" ".join(str(exc).split()))  # openstacksdk's errors quote the auth URL
            raise ConfigError(auth.read_from, f"OS_* cloud auth: {said}", key="OS_AUTH_URL") from None
        return auth
    aside = [k for k in ("OS_CLOUD", "OS_AUTH_URL") if k in origin["ignored"]]
    hint = f" (the shell's {' and '.join(aside)} count only where there is no {ENV_FILE})" if aside else ""
    raise ConfigError(
        ENV_FILE,
        f"no cloud auth: set OS_CLOUD (with clouds.yaml) or OS_AUTH_URL and the other OS_* variables{hint}",
        key="OS_CLOUD",
    )


def _named_cloud(env: dict[str, str], origin: dict, project_dir: Path, known: KnownCloud | None = None) -> CloudAuth:
    name = env["OS_CLOUD"]
    config_file = None
    if env.get("OS_CLIENT_CONFIG_FILE"):
        given = env["OS_CLIENT_CONFIG_FILE"]
        config_file = project_dir / Path(given).expanduser()
        if not config_file.is_file():
            raise ConfigError(
                origin["read_from"],
                f"OS_CLIENT_CONFIG_FILE={given}: {config_file} not found (the clouds.yaml that defines OS_CLOUD)",
                key="OS_CLIENT_CONFIG_FILE",
            )
    overrides = {option: env[var] for var, option in _CLOUD_OVERRIDES.items() if env.get(var)}
    auth = CloudAuth(cloud=name, config_file=config_file, options=tuple(sorted(overrides.items())), **origin)
    if known is not None and known(auth, project_dir):
        return auth
    if config_file is not None:
        _check_clouds_file(config_file, name)
    where = auth.read_from
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


def ssh_key(env: dict[str, str], project_dir: Path) -> Path:
    # Relative paths are relative to the project, not to wherever gpu-rent happens to be started from.
    return project_dir / Path(env.get("GPU_RENT_SSH_KEY", DEFAULT_SSH_KEY)).expanduser()
