"""gpu_rent.project.settings: every bad input is one line naming file, line and key; good input becomes one Settings.

It stays one file past 500 lines, as config.py does: one test group per key, beside the loader's.
"""

import ipaddress
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_rent.project import settings as config
from gpu_rent.project import swarmui_versions
from gpu_rent.project.env import CloudAuth
from gpu_rent.project.errors import ConfigError, masked
from gpu_rent.project.keys import _PARSERS, KEYS
from gpu_rent.project.settings import Settings, load

PASSWORD = "pw-SECRET-7f3a"
APP_SECRET = "appcred-SECRET-91c2"
CIVITAI = "civitai-SECRET-55e1"

CLOUDS_YAML = f"""\
clouds:
  test:
    auth:
      auth_url: http://127.0.0.1:5999/v3
      username: gpu-rent-user
      password: {PASSWORD}
      project_name: gpu-rent
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
  other:
    auth:
      auth_url: http://127.0.0.1:5998/v3
      username: someone
      password: other-pw
      project_name: other
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionTwo
"""

MINIMAL_VARS = "POOL=ru-7a\nFLAVOR=gpu.a100.1\nIMAGE=Ubuntu 22.04 LTS 64-bit\n"
CLOUD_ENV = f"OS_CLOUD=test\nOS_CLIENT_CONFIG_FILE=clouds.yaml\nCIVITAI_TOKEN={CIVITAI}\n"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The developer's own OS_* / key settings must not leak into (or rescue) any test."""
    for key in list(os.environ):
        if key.startswith(("OS_", "GPU_RENT_")) or key == "CIVITAI_TOKEN":
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


def make_project(root: Path, vars_text: str | None = MINIMAL_VARS, env_text: str | None = CLOUD_ENV) -> Path:
    project = root / "project"
    project.mkdir(exist_ok=True)
    (project / "clouds.yaml").write_text(CLOUDS_YAML)
    if vars_text is not None:
        (project / "gpu-rent.vars").write_text(vars_text)
    if env_text is not None:
        (project / ".env").write_text(env_text)
    return project


def load_error(project: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load(project)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


# --- bad input ------------------------------------------------------------------------------------------------------

V = MINIMAL_VARS  # three lines, so a key added after it is on line 4

BAD = [
    # id, gpu-rent.vars, .env, where (exact prefix), key, a fragment of the explanation
    ("unknown key", "POOL=ru-7a\nIMAGE=x\nFLAVOUR=gpu.a100.1\n", CLOUD_ENV, "gpu-rent.vars:3", "FLAVOUR",
     "unknown key FLAVOUR (did you mean FLAVOR?)"),
    ("unknown key lowercase", V + "idle_minutes=5\n", CLOUD_ENV, "gpu-rent.vars:4", "idle_minutes",
     "did you mean IDLE_MINUTES?"),
    ("unknown key no hint", V + "COLOUR_SCHEME=dark\n", CLOUD_ENV, "gpu-rent.vars:4", "COLOUR_SCHEME", "known keys"),
    ("missing required", "POOL=ru-7a\nIMAGE=x\n", CLOUD_ENV, "gpu-rent.vars", "FLAVOR", "is required"),
    ("empty required", "POOL=\nFLAVOR=f\nIMAGE=x\n", CLOUD_ENV, "gpu-rent.vars:1", "POOL", "is required"),
    ("not an integer", V + "BOOT_VOLUME_GB=abc\n", CLOUD_ENV, "gpu-rent.vars:4", "BOOT_VOLUME_GB=abc",
     "is not a whole number (GiB, 1..65536)"),
    ("integer with underscore", V + "DATA_VOLUME_GB=1_000\n", CLOUD_ENV, "gpu-rent.vars:4", "DATA_VOLUME_GB",
     "is not a whole number"),
    ("zero volume", V + "BOOT_VOLUME_GB=0\n", CLOUD_ENV, "gpu-rent.vars:4", "BOOT_VOLUME_GB=0", "out of range"),
    ("zero idle minutes", V + "IDLE_MINUTES=0\n", CLOUD_ENV, "gpu-rent.vars:4", "IDLE_MINUTES", "out of range"),
    ("idle minutes past ten years", V + "IDLE_MINUTES=5256001\n", CLOUD_ENV, "gpu-rent.vars:4",
     "IDLE_MINUTES=5256001", "is out of range (minutes, 1..5256000 (ten years))"),
    ("volume past 64 TiB", V + "DATA_VOLUME_GB=65537\n", CLOUD_ENV, "gpu-rent.vars:4", "DATA_VOLUME_GB",
     "out of range"),
    ("negative grace", V + "IDLE_GRACE_MINUTES=-1\n", CLOUD_ENV, "gpu-rent.vars:4", "IDLE_GRACE_MINUTES",
     "out of range"),
    ("port too high", V + "LOCAL_PORT=70000\n", CLOUD_ENV, "gpu-rent.vars:4", "LOCAL_PORT=70000",
     "out of range (a TCP port, 1..65535)"),
    ("port zero", V + "REMOTE_PORT=0\n", CLOUD_ENV, "gpu-rent.vars:4", "REMOTE_PORT", "out of range"),
    ("bad bool", V + "PULL_OUTPUT=maybe\n", CLOUD_ENV, "gpu-rent.vars:4", "PULL_OUTPUT=maybe", "yes/no"),
    ("bad cidr", V + "OPERATOR_CIDR=10.0.0.300/24\n", CLOUD_ENV, "gpu-rent.vars:4", "OPERATOR_CIDR",
     "is not an IP network"),
    ("subnet not ipv4", V + "SUBNET_CIDR=fd00::/64\n", CLOUD_ENV, "gpu-rent.vars:4", "SUBNET_CIDR", "IPv4"),
    ("subnet too small", V + "SUBNET_CIDR=10.1.2.0/30\n", CLOUD_ENV, "gpu-rent.vars:4", "SUBNET_CIDR", "too small"),
    ("negative price", V + "PRICE_PER_HOUR=-1\n", CLOUD_ENV, "gpu-rent.vars:4", "PRICE_PER_HOUR", "out of range"),
    ("price not a number", V + "PRICE_PER_HOUR=cheap\n", CLOUD_ENV, "gpu-rent.vars:4", "PRICE_PER_HOUR",
     "not a number"),
    ("push pair without =", V + "PUSH_FOLDERS=Models\n", CLOUD_ENV, "gpu-rent.vars:4", "PUSH_FOLDERS",
     "'Models', not LOCAL=REMOTE"),
    ("push outside the data volume", V + "PUSH_FOLDERS=Models=../etc\n", CLOUD_ENV, "gpu-rent.vars:4",
     "PUSH_FOLDERS", "REMOTE is a folder on the data volume"),
    ("push to an absolute path", V + "PUSH_FOLDERS=Models=/root\n", CLOUD_ENV, "gpu-rent.vars:4", "PUSH_FOLDERS",
     "REMOTE is a folder on the data volume"),
    ("bad ssh user", V + "SSH_USER=Root\n", CLOUD_ENV, "gpu-rent.vars:4", "SSH_USER", "user name"),
    ("bad name", V + "NAME=Gpu_Rent\n", CLOUD_ENV, "gpu-rent.vars:4", "NAME=Gpu_Rent", "is not a valid name"),
    ("name too long", V + "NAME=a" + "b" * 31 + "\n", CLOUD_ENV, "gpu-rent.vars:4", "NAME", "is not a valid name"),
    ("duplicate key", "POOL=a\nFLAVOR=f\nIMAGE=i\n\nPOOL=b\n", CLOUD_ENV, "gpu-rent.vars:5", "POOL",
     "given twice (lines 1 and 5)"),
    ("line without =", V + "# comment\nIDLE_MINUTES 30\n", CLOUD_ENV, "gpu-rent.vars:5", "IDLE_MINUTES",
     "has no '='"),
    ("unmatched quote", V + 'VOLUME_TYPE="fast\n', CLOUD_ENV, "gpu-rent.vars:4", "VOLUME_TYPE", "unmatched quote"),
    ("nul in a value", "POOL=ru\x00\nFLAVOR=f\nIMAGE=i\n", CLOUD_ENV, "gpu-rent.vars:1", "POOL",
     "POOL: the value holds a line break or another control character"),
    ("esc in a value", V + 'EXTERNAL_NETWORK="ext\x1b[31m"\n', CLOUD_ENV, "gpu-rent.vars:4", "EXTERNAL_NETWORK",
     "EXTERNAL_NETWORK: the value holds a line break or another control character"),
    ("esc in a key", V + "\x1b[2JIMAGE=x\n", CLOUD_ENV, "gpu-rent.vars:4", "KEY=VALUE",
     "line holds a control character before its '='"),
    ("unknown llm runtime", V + "LLM_RUNTIME=vllm\n", CLOUD_ENV, "gpu-rent.vars:4", "LLM_RUNTIME=vllm",
     "is none of none, ollama, llamacpp (none, ollama or llamacpp)"),
    ("llm port out of range", V + "LLM_REMOTE_PORT=65536\n", CLOUD_ENV, "gpu-rent.vars:4", "LLM_REMOTE_PORT",
     "out of range"),
    ("llm release not an archive url", V + "LLM_RELEASE_URL=ftp://mirror/ollama.tgz\n", CLOUD_ENV, "gpu-rent.vars:4",
     "LLM_RELEASE_URL=ftp://mirror/ollama.tgz",
     "is not an https or http URL of a .tar.zst or .tar.gz (and no user@ in it)"),
    ("llm release with a password", V + "LLM_RELEASE_URL=https://me:pw@mirror/o.tar.zst\n", CLOUD_ENV,
     "gpu-rent.vars:4", "LLM_RELEASE_URL=https://***@mirror/o.tar.zst", "no user@ in it"),
    ("bad llm switch", V + "IDLE_LLM=sometimes\n", CLOUD_ENV, "gpu-rent.vars:4", "IDLE_LLM=sometimes", "yes/no"),
    ("llm port is swarmui's", V + "LLM_RUNTIME=ollama\nLLM_LOCAL_PORT=17801\n", CLOUD_ENV, "gpu-rent.vars:5",
     "LLM_LOCAL_PORT=17801", "is LOCAL_PORT too: SwarmUI and the LLM runtime need a port each on this machine"),
    ("unknown env key", V, CLOUD_ENV + "AWS_SECRET=x\n", ".env:4", "AWS_SECRET",
     "unknown key AWS_SECRET (allowed: OS_* cloud auth, GPU_RENT_SSH_KEY, CIVITAI_TOKEN)"),
    ("env key without value", V, CLOUD_ENV + "GPU_RENT_SSH_KEY\n", ".env:4", "GPU_RENT_SSH_KEY", "has no value"),
    ("env line that is no setting", V, CLOUD_ENV + "\n\n  this is not a setting\n", ".env:6", "KEY=VALUE",
     "line is not KEY=VALUE"),
    ("env unmatched quote", V, "OS_CLOUD='test\nOS_CLIENT_CONFIG_FILE=clouds.yaml\n", ".env:1", "OS_CLOUD=",
     "cannot be read (an unmatched quote?)"),
    ("env duplicate key", V, CLOUD_ENV + "GPU_RENT_SSH_KEY=a\n\nexport GPU_RENT_SSH_KEY=b\n", ".env:6",
     "GPU_RENT_SSH_KEY", "given twice (lines 4 and 6)"),
    ("no cloud auth", V, "GPU_RENT_SSH_KEY=~/.ssh/k\n", ".env", "OS_CLOUD", "no cloud auth"),
    ("os_cloud not in clouds.yaml", V, "OS_CLOUD=nope\nOS_CLIENT_CONFIG_FILE=clouds.yaml\n", ".env", "OS_CLOUD=nope",
     "clouds.yaml"),
    ("clouds.yaml missing", V, "OS_CLOUD=test\nOS_CLIENT_CONFIG_FILE=missing/clouds.yaml\n", ".env",
     "OS_CLIENT_CONFIG_FILE=missing/clouds.yaml", "not found"),
    ("region not in cloud", V, CLOUD_ENV + "OS_REGION_NAME=Mars\n", ".env", "OS_CLOUD=test", "Mars"),
]  # fmt: skip


@pytest.mark.parametrize(("vars_text", "env_text", "where", "key", "fragment"), [c[1:] for c in BAD],
                         ids=[c[0] for c in BAD])  # fmt: skip
def test_bad_config(tmp_path: Path, vars_text: str, env_text: str, where: str, key: str, fragment: str) -> None:
    message = load_error(make_project(tmp_path, vars_text, env_text))
    assert message.startswith(f"{where}: "), message
    assert key in message
    assert fragment in message


def test_bad_config_table_is_big_enough() -> None:
    assert len(BAD) >= 12


@pytest.mark.parametrize(
    ("vars_text", "expected"),
    [
        ("POOL=a\nFLAVOR=f\nIMAGE=i\n\n# size\n\nBOOT_VOLUME_GB=abc\n",
         "gpu-rent.vars:7: BOOT_VOLUME_GB=abc is not a whole number (GiB, 1..65536)"),
        ("POOL=a\nIMAGE=i\n", "gpu-rent.vars: FLAVOR is required (the flavor to rent, e.g. FLAVOR=gpu.a100.1)"),
        ("POOL=a\nIMAGE=i\nFLAVOUR=f\n", "gpu-rent.vars:3: unknown key FLAVOUR (did you mean FLAVOR?)"),
    ],
)  # fmt: skip
def test_messages_read_exactly_like_this(tmp_path: Path, vars_text: str, expected: str) -> None:
    assert load_error(make_project(tmp_path, vars_text)) == expected


def test_an_unreadable_env_line_never_shows_its_value(tmp_path: Path) -> None:
    # python-dotenv alone would skip the line with a warning, and the command would go on without it
    project = make_project(tmp_path, env_text=CLOUD_ENV + f'OS_PASSWORD="{PASSWORD}\n')
    assert load_error(project) == ".env:4: OS_PASSWORD= has a value that cannot be read (an unmatched quote?)"


TOKEN = "civitai_8f3e9a7b6c5d4e3f2a1b"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (TOKEN, "line is not KEY=VALUE (its text is not shown: .env holds secrets)"),
        ("8F3E9A7B6C5D4E3F2A1B", "line is not KEY=VALUE (its text is not shown: .env holds secrets)"),
        (f"{TOKEN}=", "unknown key, not shown as it is no upper-case name (.env holds secrets; allowed: OS_*"),
        ("dGhpcyBpcyBhIHNlY3JldA==", "unknown key, not shown as it is no upper-case name"),
        (f"{TOKEN}='x", "line is not KEY=VALUE (its text is not shown: .env holds secrets)"),
    ],
    ids=["alone", "upper-case alone", "before =", "base64", "unmatched quote"],
)
def test_a_secret_pasted_on_an_env_line_of_its_own_is_never_shown(tmp_path: Path, line: str, said: str) -> None:
    # twice: "given twice" must not show it either
    project = make_project(tmp_path, env_text=CLOUD_ENV + f"\n{line}\n{line}\n")
    message = load_error(project)
    assert message.startswith(f".env:5: {said}"), message
    assert TOKEN not in message and "8F3E" not in message and "dGhp" not in message


def test_missing_vars_file(tmp_path: Path) -> None:
    project = make_project(tmp_path, vars_text=None)
    assert load_error(project) == (
        f"gpu-rent.vars: not found in {project} (run gpu-rent in a project folder, or pass --project)"
    )


def test_error_carries_file_line_and_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load(make_project(tmp_path, V + "LOCAL_PORT=x\n"))
    assert (caught.value.file, caught.value.line, caught.value.key) == ("gpu-rent.vars", 4, "LOCAL_PORT")


def test_os_cloud_not_found_names_the_file_and_the_clouds_there(tmp_path: Path) -> None:
    project = make_project(tmp_path, env_text="OS_CLOUD=nope\nOS_CLIENT_CONFIG_FILE=clouds.yaml\n")
    message = load_error(project)
    assert message.startswith(f".env: OS_CLOUD=nope is not in {project / 'clouds.yaml'}")
    assert "other, test" in message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("clouds:\n  test:\n    auth: [1, 2\n",
         ":4: is not readable YAML: while parsing a flow sequence expected ',' or ']', but got '<stream end>'"),
        (b"\xff\xfeclouds:\n", ":1: is not UTF-8 text (save it as UTF-8)"),
        ("clouds:\n\ttest: {}\n", ":2: is not readable YAML: while scanning for the next token found character '\\t' "
         "that cannot start any token"),
        # a password written unquoted is an alias to YAML, and PyYAML's error quotes it whole
        (f"clouds:\n  test:\n    auth:\n      password: *{PASSWORD}\n",
         ":4: is not readable YAML: found undefined alias '...'"),
        (f"clouds:\n  test:\n    auth:\n      password: !{PASSWORD}\n", ":4: is not readable YAML: could not "
         "determine a constructor for the tag '...'"),
        ("# mine\nclouds: 5\n", ":2: clouds: is not a mapping of cloud names to their settings"),
        ("clouds:\n  other: 5\n  test: [a]\n", ":3: clouds: test: is not a mapping of settings"),
        ("clouds:\n  test:\n    auth: yes\n", ":3: clouds: test: auth: is not a mapping"),
        ("- clouds\n", ":1: is not a mapping with clouds:"),
        ("clouds:\n  test:\n    api_timeout: " + "9" * 5000 + "\n",
         ":3: is not readable YAML: Exceeds the limit (4300 digits) for integer string conversion"),
    ],
    ids=["syntax", "not utf-8", "tab", "alias", "tag", "clouds not a mapping", "entry", "auth", "a list", "digits"],
)  # fmt: skip
def test_a_clouds_yaml_that_cannot_be_parsed_says_so_with_its_line(tmp_path: Path, text, said) -> None:
    # before: openstacksdk skipped the file with a log warning, and OS_CLOUD was "not in any clouds.yaml"
    project = make_project(tmp_path)
    clouds = project / "clouds.yaml"
    clouds.write_bytes(text if isinstance(text, bytes) else text.encode())
    message = load_error(project)
    assert message.startswith(f"{clouds}{said}"), message
    assert PASSWORD not in message


def test_a_clouds_json_that_cannot_be_parsed_says_so_with_its_line(tmp_path: Path) -> None:
    project = make_project(tmp_path, env_text="OS_CLOUD=test\nOS_CLIENT_CONFIG_FILE=clouds.json\n")
    (project / "clouds.json").write_text('{"clouds":\n  {"test": {]}\n')  # openstacksdk reads a *json as JSON
    assert load_error(project) == (
        f"{project / 'clouds.json'}:2: is not readable JSON: Expecting property name enclosed in double quotes"
    )
    (project / "clouds.json").write_text('{"clouds": {"test": {"api_timeout": ' + "9" * 5000 + "}}}")
    assert load_error(project) == (
        f"{project / 'clouds.json'}: is not readable JSON: Exceeds the limit (4300 digits) for integer string "
        "conversion: value has 5000 digits"
    )


def test_missing_env_file_without_environment_auth(tmp_path: Path) -> None:
    message = load_error(make_project(tmp_path, env_text=None))
    assert message.startswith(".env: not found")
    assert "OS_CLOUD" in message


def _not_a_file(project: Path, name: str, kind: str) -> None:
    path = project / name
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(project / "nowhere")


@pytest.mark.timeout(20)  # before: the FIFO blocked the read forever, /dev/zero filled the memory
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: FIFOs and /dev/zero")
@pytest.mark.parametrize("name", ["gpu-rent.vars", ".env"])
@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("fifo", "is a named pipe (FIFO), not a file"),
        ("device", "is a device, not a file"),
        ("directory", "is a directory, not a file"),
        ("dangling", "is a symlink to {project}/nowhere, which is not there"),
    ],
)
def test_a_settings_file_that_is_no_regular_file_is_named_for_what_it_is(tmp_path, name, kind, said) -> None:
    project = make_project(tmp_path)
    _not_a_file(project, name, kind)
    assert load_error(project) == f"{name}: {said.format(project=project)}"


@pytest.mark.parametrize("name", ["gpu-rent.vars", ".env"])
def test_a_settings_file_over_a_mebibyte_is_refused_unread(tmp_path, name) -> None:
    project = make_project(tmp_path)
    with (project / name).open("a") as f:
        f.write(("#" * 1023 + "\n") * 1024)
    assert load_error(project) == f"{name}: is larger than 1 MiB: far more than this file ever holds"


# --- good input -----------------------------------------------------------------------------------------------------


def test_defaults(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    settings = load(project)
    assert settings.project_dir == project.resolve()
    assert (settings.pool, settings.flavor, settings.image) == ("ru-7a", "gpu.a100.1", "Ubuntu 22.04 LTS 64-bit")
    assert settings.pool_fallback == ()
    assert settings.flavor_fallback == ()
    assert settings.volume_type is None
    assert (settings.boot_volume_gb, settings.data_volume_gb) == (50, 100)
    assert (settings.idle_minutes, settings.idle_grace_minutes) == (30, 15)
    assert (settings.local_port, settings.remote_port) == (17801, 7801)
    assert settings.pull_output is True
    assert settings.keep_floating_ip is False
    assert settings.operator_cidr == "auto"
    assert settings.ssh_user == "root"
    assert settings.price_per_hour is None
    assert settings.name == "gpu-rent"
    assert settings.external_network is None
    assert settings.subnet_cidr == "192.168.77.0/24"
    assert settings.swarmui_repo == "https://github.com/mcmonkeyprojects/SwarmUI.git"
    assert settings.swarmui_version == swarmui_versions.PINNED
    assert settings.require_gpu is True
    assert settings.ssh_key == Path(os.environ["HOME"]) / ".ssh" / "id_ed25519"
    assert settings.civitai_token == CIVITAI
    assert settings.runtime_dir == project.resolve() / ".gpu-rent"
    assert settings.flavors() == ("gpu.a100.1",)
    assert settings.pools() == ("ru-7a",)
    assert (settings.llm_runtime, settings.llm_local_port, settings.llm_remote_port) == ("none", 21434, 11434)
    assert settings.idle_llm is True and settings.llm_models == []


def test_a_byte_order_mark_that_windows_editors_write_is_no_part_of_the_first_key(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    for name, text in (("gpu-rent.vars", MINIMAL_VARS), (".env", CLOUD_ENV)):
        (project / name).write_text(text, encoding="utf-8-sig")
    settings = load(project)
    assert (settings.pool, settings.cloud.cloud) == ("ru-7a", "test")


@pytest.mark.parametrize(("name", "text"), [("gpu-rent.vars", MINIMAL_VARS), (".env", CLOUD_ENV)], ids=["vars", "env"])
def test_a_byte_that_is_not_utf8_is_told_by_its_line_and_never_shown(tmp_path: Path, name: str, text: str) -> None:
    project = make_project(tmp_path)
    (project / name).write_bytes(text.encode() + b"# caf\xe9\nIMAGE=x\n")
    assert load_error(project) == f"{name}:4: is not UTF-8 text (save it as UTF-8)"


@pytest.mark.parametrize("key", [key for key in KEYS if key.endswith(("_GB", "_PORT", "_MINUTES", "_PERCENT"))])
def test_a_whole_number_of_any_length_is_out_of_range_not_a_traceback(tmp_path: Path, key: str) -> None:
    # int() refuses more than 4300 digits with a ValueError; 400 nines overflowed hold's datetime later
    for digits in ("9" * 400, "9" * 5000, "0" * 5000 + "7" * 20):
        message = load_error(make_project(tmp_path, V + f"{key}={digits}\n"))
        assert message.startswith(f"gpu-rent.vars:4: {key}={digits} is out of range ("), message[:80]


def test_keys_table_matches_settings_fields() -> None:
    names = {f.lower() for f in KEYS}
    fields = set(Settings.__dataclass_fields__)
    assert names <= fields
    assert fields - names == {"project_dir", "ssh_key", "cloud", "civitai_token", "seed", "llm_models"}
    for key, (kind, default, meaning) in KEYS.items():
        assert kind and meaning, key
        # a default written into gpu-rent.vars must mean the same as leaving the key out
        if isinstance(default, str | int | float):
            assert _PARSERS[key](str(default)) == default, key


def test_every_key_given(tmp_path: Path) -> None:
    text = """\
# a comment, then blank lines

  POOL = ru-7a
POOL_FALLBACK=ru-7b, ru-3a ,, ru-7b
FLAVOR='gpu.a100.1'
FLAVOR_FALLBACK = gpu.a100.1 , gpu.v100.1,,  gpu.t4.1 ,
IMAGE = "Ubuntu 22.04 LTS 64-bit"
VOLUME_TYPE=fast.ru-7a
BOOT_VOLUME_GB=+60
DATA_VOLUME_GB=500
IDLE_MINUTES=10
IDLE_GRACE_MINUTES=0
LOCAL_PORT=1
REMOTE_PORT=65535
PULL_OUTPUT=No
KEEP_FLOATING_IP=ON
OPERATOR_CIDR=203.0.113.7
SSH_USER=ubuntu
PRICE_PER_HOUR=1.25
NAME=my-rent-2
EXTERNAL_NETWORK="external network"
SUBNET_CIDR=10.20.30.5/24
SWARMUI_REPO=https://example.org/SwarmUI.git
SWARMUI_VERSION=0.9.7
REQUIRE_GPU=0
"""
    s = load(make_project(tmp_path, text))
    assert s.pool == "ru-7a"
    assert s.pool_fallback == ("ru-7b", "ru-3a", "ru-7b")
    assert s.pools() == ("ru-7a", "ru-7b", "ru-3a")
    assert s.flavor == "gpu.a100.1"
    assert s.flavor_fallback == ("gpu.a100.1", "gpu.v100.1", "gpu.t4.1")
    assert s.flavors() == ("gpu.a100.1", "gpu.v100.1", "gpu.t4.1")
    assert s.image == "Ubuntu 22.04 LTS 64-bit"
    assert s.volume_type == "fast.ru-7a"
    assert (s.boot_volume_gb, s.data_volume_gb, s.idle_minutes, s.idle_grace_minutes) == (60, 500, 10, 0)
    assert (s.local_port, s.remote_port) == (1, 65535)
    assert (s.pull_output, s.keep_floating_ip, s.require_gpu) == (False, True, False)
    assert s.operator_cidr == "203.0.113.7/32"
    assert s.ssh_user == "ubuntu"
    assert s.price_per_hour == 1.25
    assert s.name == "my-rent-2"
    assert s.external_network == "external network"
    assert s.subnet_cidr == "10.20.30.0/24"
    assert (s.swarmui_repo, s.swarmui_version) == ("https://example.org/SwarmUI.git", "0.9.7")


def test_the_llm_settings(tmp_path: Path) -> None:
    text = V + "LLM_RUNTIME=llamacpp\nLLM_LOCAL_PORT=18080\nLLM_REMOTE_PORT=8080\nIDLE_LLM=off\n"
    s = load(make_project(tmp_path, text))
    assert (s.llm_runtime, s.llm_local_port, s.llm_remote_port, s.idle_llm) == ("llamacpp", 18080, 8080, False)
    assert s.llm_models == []  # no ollama-models.yaml: no models
    assert s.llm_release_url is None
    mirror = "https://mirror.example/ollama/v0.32.15/ollama-linux-amd64.tar.zst"
    assert load(make_project(tmp_path, V + f"LLM_RELEASE_URL={mirror}\n")).llm_release_url == mirror
    gz = "https://mirror.example/llama.cpp/b1/llama-b1-bin-ubuntu-vulkan-x64.tar.gz"
    llamacpp = V + f"LLM_RUNTIME=llamacpp\nLLM_RELEASE_URL={gz}\n"
    assert load(make_project(tmp_path, llamacpp)).llm_release_url == gz


@pytest.mark.parametrize(
    ("runtime", "url", "said"),
    [
        ("ollama", "https://m/llama-b1-bin-ubuntu.tar.gz", "is not a .tar.zst: LLM_RUNTIME=ollama's release is one"),
        ("llamacpp", "https://m/ollama-linux-amd64.tar.zst", "is not a .tar.gz: LLM_RUNTIME=llamacpp's release is one"),
    ],
)
def test_a_release_url_of_the_other_runtime_is_refused_on_its_line(tmp_path, runtime, url, said):
    text = V + f"LLM_RUNTIME={runtime}\nLLM_RELEASE_URL={url}\n"
    assert load_error(make_project(tmp_path, text)) == f"gpu-rent.vars:5: LLM_RELEASE_URL={url} {said}"
    # with no runtime the URL is read by nothing
    assert load(make_project(tmp_path, V + f"LLM_RELEASE_URL={url}\n")).llm_release_url == url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the key the file sets is named, on its line; the LLM one when both are set
        ("LLM_RUNTIME=ollama\nREMOTE_PORT=11434\n",
         "gpu-rent.vars:5: REMOTE_PORT=11434 is LLM_REMOTE_PORT too: SwarmUI and the LLM runtime need a port each on "
         "the VM"),
        ("LLM_RUNTIME=ollama\nLOCAL_PORT=8000\nLLM_LOCAL_PORT=8000\n",
         "gpu-rent.vars:6: LLM_LOCAL_PORT=8000 is LOCAL_PORT too: SwarmUI and the LLM runtime need a port each on "
         "this machine"),
    ],
)  # fmt: skip
def test_the_llm_runtime_needs_ports_of_its_own(tmp_path: Path, text: str, expected: str) -> None:
    assert load_error(make_project(tmp_path, V + text)) == expected


def test_without_an_llm_runtime_its_ports_are_not_judged(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, V + "LLM_LOCAL_PORT=17801\nLLM_REMOTE_PORT=7801\n"))
    assert (s.llm_runtime, s.llm_local_port) == ("none", 17801)


def test_empty_value_means_default(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, V + "IDLE_MINUTES=\nVOLUME_TYPE=''\nFLAVOR_FALLBACK=\n"))
    assert (s.idle_minutes, s.volume_type, s.flavor_fallback) == (30, None, ())


def test_quotes_keep_inner_spaces_and_equals(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, "POOL=a\nFLAVOR=f\nIMAGE=' my image = v2 '\n"))
    assert s.image == " my image = v2 "


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("TRUE", True), ("yes", True), ("Yes", True), ("1", True), ("on", True), ("On", True),
     ("false", False), ("False", False), ("no", False), ("NO", False), ("0", False), ("off", False), ("OFF", False)],
)  # fmt: skip
def test_bool_forms(tmp_path: Path, raw: str, expected: bool) -> None:
    assert load(make_project(tmp_path, V + f"KEEP_FLOATING_IP={raw}\n")).keep_floating_ip is expected


@pytest.mark.parametrize("raw", ["y", "2", "enabled", "truee", "-1"])
def test_bool_rejects_other_forms(tmp_path: Path, raw: str) -> None:
    message = load_error(make_project(tmp_path, V + f"REQUIRE_GPU={raw}\n"))
    assert message.startswith("gpu-rent.vars:4: REQUIRE_GPU=")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("auto", "auto"),
        ("AUTO", "auto"),
        ("203.0.113.7", "203.0.113.7/32"),
        ("203.0.113.7/24", "203.0.113.0/24"),
        ("0.0.0.0/0", "0.0.0.0/0"),  # loaded, so stop and status work; up refuses it (resolved_operator_cidr)
        ("2001:db8::1", "2001:db8::1/128"),
        ("2001:db8::1/48", "2001:db8::/48"),
    ],
)
def test_operator_cidr_normalised(tmp_path: Path, raw: str, expected: str) -> None:
    assert load(make_project(tmp_path, V + f"OPERATOR_CIDR={raw}\n")).operator_cidr == expected


@pytest.mark.parametrize("raw", ["0.0.0.0/0", "::/0"])
def test_up_refuses_an_operator_cidr_of_every_address(tmp_path: Path, raw: str) -> None:
    settings = load(make_project(tmp_path, V + f"OPERATOR_CIDR={raw}\n"))
    with pytest.raises(ConfigError) as caught:
        settings.resolved_operator_cidr()
    assert str(caught.value).startswith(f"gpu-rent.vars: OPERATOR_CIDR={raw} is every address: SSH open to the world")
    assert caught.value.key == "OPERATOR_CIDR"


def test_operator_cidr_auto_is_the_public_address_on_the_route_to_keystone(tmp_path: Path, monkeypatch) -> None:
    routes, local = [], ["81.2.69.142"]

    def route(host: str):
        routes.append(host)
        return ipaddress.ip_address(local[0]), ipaddress.ip_address("93.184.216.34")

    monkeypatch.setattr(config, "route_to", route)  # the one route setup's check of auto goes through too
    settings = load(make_project(tmp_path, V))
    assert settings.resolved_operator_cidr() == "81.2.69.142/32" and routes == ["127.0.0.1"]
    local[0] = "192.168.1.20"
    with pytest.raises(ConfigError) as caught:
        settings.resolved_operator_cidr()
    assert str(caught.value) == (
        "gpu-rent.vars: OPERATOR_CIDR=auto: this machine reaches the cloud from 192.168.1.20, a private address (NAT): "
        "set OPERATOR_CIDR to your public address, e.g. OPERATOR_CIDR=203.0.113.7/32"
    )
    assert caught.value.key == "OPERATOR_CIDR"


def test_operator_cidr_auto_without_a_route_says_so() -> None:
    def route(host: str):
        raise OSError(101, "Network is unreachable")

    with pytest.raises(ConfigError) as caught:
        config.auto_operator_cidr("keystone.example.com", route)
    assert str(caught.value) == (
        "gpu-rent.vars: OPERATOR_CIDR=auto: no route to keystone.example.com ([Errno 101] Network is unreachable); "
        "set OPERATOR_CIDR"
    )
    # the real route, on loopback only: this machine reaches 127.0.0.1 from 127.0.0.1, not a public address
    with pytest.raises(ConfigError, match=r"from 127\.0\.0\.1, a private address"):
        config.auto_operator_cidr("127.0.0.1")


# --- .env, cloud auth, secrets --------------------------------------------------------------------------------------


def test_cloud_auth_from_clouds_yaml(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    cloud = load(project).cloud
    assert cloud.cloud == "test"
    assert cloud.config_file == project / "clouds.yaml"  # relative OS_CLIENT_CONFIG_FILE is the project's
    assert cloud.describe() == 'cloud "test" (http://127.0.0.1:5999/v3), project gpu-rent'
    params = cloud.ansible_params()
    assert params["auth"] == {
        "auth_url": "http://127.0.0.1:5999/v3",
        "username": "gpu-rent-user",
        "password": PASSWORD,
        "project_name": "gpu-rent",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
    }
    assert params["auth_type"] == "password"
    assert params["region_name"] == "RegionOne"
    assert params["interface"] == "public"


def test_cloud_auth_from_os_variables(tmp_path: Path) -> None:
    env = (
        "OS_AUTH_URL=http://127.0.0.1:5999/v3\n"
        "OS_AUTH_TYPE=v3applicationcredential\n"
        "OS_APPLICATION_CREDENTIAL_ID=app-id-1\n"
        f"OS_APPLICATION_CREDENTIAL_SECRET={APP_SECRET}\n"
        "OS_REGION_NAME=RegionOne\n"
        "OS_INTERFACE=internal\n"
    )
    cloud = load(make_project(tmp_path, env_text=env)).cloud
    assert cloud.cloud is None
    assert cloud.ansible_params() == {
        "auth": {
            "auth_url": "http://127.0.0.1:5999/v3",
            "application_credential_id": "app-id-1",
            "application_credential_secret": APP_SECRET,
        },
        "auth_type": "v3applicationcredential",
        "region_name": "RegionOne",
        "interface": "internal",
    }
    assert cloud.describe() == "OS_AUTH_URL (http://127.0.0.1:5999/v3)"
    assert APP_SECRET not in repr(cloud)
    assert "http://127.0.0.1:5999/v3" in repr(cloud)


def test_an_auth_url_is_shown_without_its_user_and_password(tmp_path: Path) -> None:
    env = f"OS_AUTH_URL=http://me:{PASSWORD}@127.0.0.1:5999/v3\nOS_USERNAME=u\nOS_PASSWORD=pw\nOS_PROJECT_ID=p\n"
    cloud = load(make_project(tmp_path, env_text=env)).cloud
    assert cloud.describe() == "OS_AUTH_URL (http://***@127.0.0.1:5999/v3), project p"
    assert repr(cloud) == "CloudAuth(auth_url='http://***@127.0.0.1:5999/v3')"
    # up to the last @: a password may hold @ and /, which URLs should escape and people do not
    assert masked("to http://me:p@ss/w@127.0.0.1:9/v3/auth: refused") == "to http://***@127.0.0.1:9/v3/auth: refused"


def test_password_auth_from_os_variables(tmp_path: Path) -> None:
    env = (
        "OS_AUTH_URL=http://127.0.0.1:5999/v3\nOS_USERNAME=u\n"
        f"OS_PASSWORD={PASSWORD}\nOS_PROJECT_ID=p-123\nOS_USER_DOMAIN_NAME=Default\n"
    )
    cloud = load(make_project(tmp_path, env_text=env)).cloud
    assert cloud.ansible_params()["auth"]["project_id"] == "p-123"
    assert cloud.describe() == "OS_AUTH_URL (http://127.0.0.1:5999/v3), project p-123"


def test_env_file_wins_over_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_CLOUD", "other")
    monkeypatch.setenv("CIVITAI_TOKEN", "from-environment")
    monkeypatch.setenv("GPU_RENT_SSH_KEY", "/from/environment")
    s = load(
        make_project(
            tmp_path, env_text="OS_CLOUD=test\nOS_CLIENT_CONFIG_FILE=clouds.yaml\nGPU_RENT_SSH_KEY=keys/mine\n"
        )
    )
    assert s.cloud.cloud == "test"
    assert s.ssh_key == s.project_dir / "keys" / "mine"
    assert s.civitai_token == "from-environment"  # not in .env, so the environment's counts: it picks no cloud


def test_beside_an_env_file_no_os_value_of_the_shell_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sourced openrc of another project or region (Selectel's rc.sh exports both) must not fill what .env
    leaves unsaid: it would send every command there, and status would take this folder's resources for gone."""
    monkeypatch.setenv("OS_REGION_NAME", "RegionTwo")
    monkeypatch.setenv("OS_PROJECT_ID", "someone-elses")
    monkeypatch.setenv("OS_INTERFACE", "internal")
    s = load(make_project(tmp_path))
    assert s.cloud.options == () and s.cloud.region().region_name == "RegionOne"  # clouds.yaml's, not the shell's
    assert s.cloud.ignored == ("OS_INTERFACE", "OS_PROJECT_ID", "OS_REGION_NAME")
    env = f"OS_AUTH_URL=http://127.0.0.1:5999/v3\nOS_USERNAME=u\nOS_PASSWORD={PASSWORD}\nOS_PROJECT_NAME=mine\n"
    auth = load(make_project(tmp_path, env_text=env)).cloud
    assert "project_id" not in dict(auth.options) and not auth.region().region_name
    # the clouds.yaml too is the one .env names: a shell's OS_CLIENT_CONFIG_FILE no longer rescues an OS_CLOUD
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "project" / "clouds.yaml"))
    message = load_error(make_project(tmp_path, env_text="OS_CLOUD=test\n"))
    assert message.startswith(".env: OS_CLOUD=test is not in any clouds.yaml"), message


def test_an_env_file_without_a_login_says_the_shell_s_does_not_count(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OS_CLOUD", "test")
    message = load_error(make_project(tmp_path, env_text="CIVITAI_TOKEN=x\n"))
    assert message.startswith(".env: no cloud auth: set OS_CLOUD"), message
    assert message.endswith("(the shell's OS_CLOUD count only where there is no .env)"), message


def test_environment_alone_when_no_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_CLOUD", "other")
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "project" / "clouds.yaml"))
    monkeypatch.setenv("OS_REGION_NAME", "RegionTwo")
    s = load(make_project(tmp_path, env_text=None))
    assert s.cloud.cloud == "other" and s.cloud.region().region_name == "RegionTwo"
    assert s.civitai_token is None
    assert s.cloud.read_from == "the shell" and s.cloud.ignored == ()
    assert s.cloud.origin("region") == ("the shell", "OS_REGION_NAME=RegionTwo")
    assert s.cloud.origin("project") == (str(tmp_path / "project" / "clouds.yaml"), 'entry "other"')
    assert s.cloud.origins() == (
        "OS_CLIENT_CONFIG_FILE, OS_CLOUD, OS_REGION_NAME from the shell; "
        f'the rest from clouds.yaml entry "other" ({tmp_path / "project" / "clouds.yaml"})'
    )


def test_doctor_s_line_names_where_each_os_value_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_REGION_NAME", "RegionTwo")
    s = load(make_project(tmp_path, env_text=CLOUD_ENV + f"OS_PASSWORD={PASSWORD}\n"))
    clouds = tmp_path / "project" / "clouds.yaml"
    assert s.cloud.origins() == (
        f'OS_CLIENT_CONFIG_FILE, OS_CLOUD, OS_PASSWORD from .env; the rest from clouds.yaml entry "test" ({clouds}); '
        "OS_PASSWORD unused beside OS_CLOUD (its entry is the whole login); "
        "the shell's OS_REGION_NAME ignored (.env is the whole login)"
    )
    assert PASSWORD not in s.cloud.origins()
    env = "OS_AUTH_URL=http://127.0.0.1:5999/v3\nOS_APPLICATION_CREDENTIAL_ID=a\nOS_REGION_NAME=RegionOne\n"
    auth = load(make_project(tmp_path, env_text=env)).cloud
    assert auth.origins().startswith("OS_APPLICATION_CREDENTIAL_ID, OS_AUTH_URL, OS_REGION_NAME from .env;")
    assert auth.origin("region") == (".env", "OS_REGION_NAME=RegionOne")
    assert auth.origin("project") == (".env", "no OS_PROJECT_ID or OS_PROJECT_NAME")


def test_env_auth_url_ignores_a_stray_os_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_CLOUD", "leftover-from-another-shell")
    s = load(make_project(tmp_path, env_text=f"OS_AUTH_URL=http://127.0.0.1:5999/v3\nOS_PASSWORD={PASSWORD}\n"))
    assert s.cloud.cloud is None


def test_env_file_does_not_touch_os_environ(tmp_path: Path) -> None:
    before = dict(os.environ)
    load(make_project(tmp_path))
    assert dict(os.environ) == before


def test_ansible_vars(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, V + "FLAVOR_FALLBACK=b,c\n"))
    av = s.ansible_vars()
    for f in Settings.__dataclass_fields__:
        assert f"gpu_rent_{f}" in av or f in ("cloud", "seed")
    assert av["gpu_rent_seed_models"] == [] and av["gpu_rent_seed_extensions"] == []  # seed.yml, one list per part
    assert av["gpu_rent_flavor_fallback"] == ["b", "c"]
    assert av["gpu_rent_project_dir"] == str(s.project_dir)
    assert av["gpu_rent_ssh_key"] == str(s.ssh_key)
    assert av["gpu_rent_ssh_public_key"] is None  # no key yet, and that is not an error here
    assert av["gpu_rent_civitai_token"] == CIVITAI
    assert av["gpu_rent_cloud_auth"]["auth"]["password"] == PASSWORD
    json.dumps(av)  # plain data only
    rest = {k: v for k, v in av.items() if k != "gpu_rent_cloud_auth"}
    assert PASSWORD not in json.dumps(rest)


def test_no_secret_in_repr(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    s = load(project)
    for text in (repr(s), str(s), repr(s.cloud)):
        assert PASSWORD not in text
        assert CIVITAI not in text
    assert "test" in repr(s.cloud)
    env = (
        f"OS_AUTH_URL=http://127.0.0.1:5999/v3\nOS_PASSWORD={PASSWORD}\nOS_APPLICATION_CREDENTIAL_SECRET={APP_SECRET}\n"
    )
    s = load(make_project(tmp_path, env_text=env))
    for text in (repr(s), repr(s.cloud)):
        assert PASSWORD not in text
        assert APP_SECRET not in text


def test_cloud_auth_is_frozen_and_hashable(tmp_path: Path) -> None:
    s = load(make_project(tmp_path))
    assert isinstance(s.cloud, CloudAuth)
    hash(s)
    with pytest.raises(AttributeError):
        s.pool = "x"  # type: ignore[misc]


# --- ssh key --------------------------------------------------------------------------------------------------------


def test_ssh_public_key_missing_private_key(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, env_text=CLOUD_ENV + "GPU_RENT_SSH_KEY=keys/id\n"))
    key = s.project_dir / "keys" / "id"
    with pytest.raises(ConfigError) as caught:
        s.ssh_public_key()
    assert str(caught.value) == f".env: GPU_RENT_SSH_KEY={key}: {key} not found (ssh-keygen -t ed25519 -f {key})"


def test_ssh_public_key_missing_pub(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, env_text=CLOUD_ENV + "GPU_RENT_SSH_KEY=keys/id\n"))
    key = s.project_dir / "keys" / "id"
    key.parent.mkdir()
    key.write_text("PRIVATE")
    with pytest.raises(ConfigError) as caught:
        s.ssh_public_key()
    assert str(caught.value) == (
        f".env: GPU_RENT_SSH_KEY={key}: {key}.pub not found (ssh-keygen -y -f {key} > {key}.pub)"
    )


def test_ssh_public_key_read(tmp_path: Path) -> None:
    s = load(make_project(tmp_path, env_text=CLOUD_ENV + "GPU_RENT_SSH_KEY=~/k\n"))
    assert s.ssh_key == Path(os.environ["HOME"]) / "k"
    Path(f"{s.ssh_key}.pub").write_text("ssh-ed25519 AAAAC3Nz me@laptop\n")
    assert s.ssh_public_key() == "ssh-ed25519 AAAAC3Nz me@laptop"
    assert s.ansible_vars()["gpu_rent_ssh_public_key"] == "ssh-ed25519 AAAAC3Nz me@laptop"


def _pub_problem(tmp_path: Path) -> tuple[Settings, Path, Callable[[], str]]:
    s = load(make_project(tmp_path, env_text=CLOUD_ENV + "GPU_RENT_SSH_KEY=id\n"))
    public = s.project_dir / "id.pub"

    def problem() -> str:
        with pytest.raises(ConfigError) as caught:
            s.ssh_public_key()
        assert "\n" not in str(caught.value)
        return str(caught.value)

    return s, public, problem


def test_a_pub_key_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path) -> None:
    s, public, problem = _pub_problem(tmp_path)
    public.write_bytes(b"\xff\xfe\n")  # before: UnicodeDecodeError, a traceback
    assert problem() == f".env: GPU_RENT_SSH_KEY={s.ssh_key}: {public} is not UTF-8 text (save it as UTF-8)"
    public.unlink()
    public.mkdir()  # before: "not found"
    assert problem() == f".env: GPU_RENT_SSH_KEY={s.ssh_key}: {public} is a directory, not a file"


def test_a_pub_key_that_cannot_be_read_is_one_line_naming_it(tmp_path: Path, monkeypatch) -> None:
    s, public, problem = _pub_problem(tmp_path)
    public.write_text("ssh-ed25519 AAAAC3Nz me@laptop\n")
    opened = os.open

    def refused(path, *args, **kwargs):  # as for a file of another user: root, who runs the tests, reads them all
        if str(path) == str(public):
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    assert problem() == f".env: GPU_RENT_SSH_KEY={s.ssh_key}: {public} cannot be read (Permission denied)"


def test_push_folders_default_and_a_custom_list(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert load(make_project(tmp_path / "a", V)).push_folders == (
        ("Models", "Models"), ("Wildcards", "Data/Wildcards"), ("workflows", "CustomWorkflows"),
    )  # fmt: skip
    custom = load(make_project(tmp_path / "b", V + "PUSH_FOLDERS=my loras = Models/Lora/ , wc=./Data/Wildcards\n"))
    assert custom.push_folders == (("my loras", "Models/Lora"), ("wc", "Data/Wildcards"))
