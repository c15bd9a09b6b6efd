"""gpu-rent setup without a cloud: option errors, the files it writes, and what a re-run keeps."""

import ipaddress
import re
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_rent.cli import setup as cli_setup
from gpu_rent.cli.app import app
from gpu_rent.project import llm_models
from gpu_rent.project import settings as config
from gpu_rent.project.errors import ConfigError
from gpu_rent.setup import login as setup_login
from gpu_rent.setup import wizard as setup_wizard
from gpu_rent.setup.wizard import Answers
from gpu_rent.util.atomic import write_atomically
from tests.unit.test_setup_prompts import IMAGE, PUBLIC_ROUTE, cloud

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu-rent.vars"


@pytest.fixture
def clouds(clouds_yaml) -> Path:
    return clouds_yaml(test="s3cret-password")


def setup(project: Path, *args: str):
    return runner.invoke(app, ["setup", "--project", str(project), *args])


def test_without_non_interactive_it_says_what_to_use(tmp_path):
    result = setup(tmp_path)
    assert result.exit_code == 2
    assert "--non-interactive" in result.output
    assert list(tmp_path.iterdir()) == []


def test_cloud_is_required(tmp_path, clouds):
    result = setup(tmp_path / "p", "--non-interactive", "--clouds-yaml", str(clouds))
    assert result.exit_code == 2
    assert "--cloud is required" in result.output
    assert not (tmp_path / "p").exists()


def test_unknown_cloud_names_the_clouds_there(tmp_path, clouds):
    result = setup(tmp_path / "p", "--non-interactive", "--clouds-yaml", str(clouds), "--cloud", "nope")
    assert result.exit_code == 2
    assert "--cloud nope is not in" in result.output and "clouds there: test" in result.output


def test_clouds_yaml_from_the_environment_is_respected(tmp_path, clouds, monkeypatch):
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    result = setup(tmp_path / "p", "--non-interactive", "--cloud", "nope")
    assert result.exit_code == 2
    assert str(clouds) in result.output


def test_missing_clouds_yaml_is_one_line(tmp_path):
    result = setup(tmp_path / "p", "--non-interactive", "--cloud", "x", "--clouds-yaml", str(tmp_path / "no.yaml"))
    assert result.exit_code == 2
    assert "--clouds-yaml" in result.output and "not found" in result.output


def test_a_project_whose_parent_is_missing_is_refused(tmp_path, clouds):
    result = setup(tmp_path / "a" / "b", "--non-interactive", "--cloud", "test", "--clouds-yaml", str(clouds))
    assert result.exit_code == 2
    assert "--project" in result.output


def test_an_unreachable_cloud_is_exit_4_without_the_password_and_writes_nothing(tmp_path, clouds):
    project = tmp_path / "p"
    args = ["--non-interactive", "--cloud", "test", "--clouds-yaml", str(clouds), "--new-key"]
    result = setup(project, *args, "--pool", "a", "--flavor", "f", "--image", "i")
    assert result.exit_code == 4
    assert "refused the login or did not answer" in result.output
    assert "s3cret" not in result.output
    assert not project.exists()


def test_vars_from_the_example_change_only_the_three_lines(tmp_path):
    text = setup_wizard.vars_text(tmp_path, {"POOL": "ru-9a", "FLAVOR": "3021", "IMAGE": "Ubuntu GPU"})
    example = EXAMPLE.read_text().splitlines()
    written = text.splitlines()
    changed = [(a, b) for a, b in zip(example, written, strict=True) if a != b]
    assert changed == [
        ("POOL=ru-7a", "POOL=ru-9a"),
        ("FLAVOR=<GPU flavor name or id>", "FLAVOR=3021"),
        ("IMAGE=<GPU image name or id>", "IMAGE=Ubuntu GPU"),
    ]


def test_env_keeps_its_other_lines(tmp_path):
    (tmp_path / ".env").write_text("# mine\nOS_CLOUD=old\nCIVITAI_TOKEN=abc\n")
    text = setup_wizard.env_text(tmp_path, {"OS_CLOUD": "new", "GPU_RENT_SSH_KEY": "/k"})
    assert text == "# mine\nOS_CLOUD=new\nCIVITAI_TOKEN=abc\nGPU_RENT_SSH_KEY=/k\n"


def test_a_rerun_keeps_what_it_is_not_given(tmp_path):
    key = tmp_path / "k"
    (tmp_path / ".env").write_text(f"OS_CLOUD=c\nOS_CLIENT_CONFIG_FILE=clouds.yaml\nGPU_RENT_SSH_KEY={key}\n")
    (tmp_path / "gpu-rent.vars").write_text("POOL=p1\nFLAVOR='f1'\nIMAGE=<GPU image name or id>\n")
    merged = setup_wizard.merged(Answers(tmp_path, flavor="f2"))
    assert (merged.cloud, merged.pool, merged.flavor, merged.image) == ("c", "p1", "f2", None)
    assert merged.clouds_yaml == tmp_path / "clouds.yaml"  # relative in .env: to the project, as config reads it
    assert merged.key == key


def test_new_key_goes_to_the_project(tmp_path):
    merged = setup_wizard.merged(Answers(tmp_path, new_key=True))
    assert merged.key == tmp_path / "id_ed25519"
    assert setup_wizard.check_key(merged) == merged.key


def test_a_missing_key_names_the_option_and_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"--key .*not found .*--new-key"):
        setup_wizard.check_key(Answers(tmp_path, key=tmp_path / "none"))


def test_a_public_key_alone_is_enough(tmp_path):
    (tmp_path / "agent.pub").write_text("ssh-ed25519 AAAA x\n")
    assert setup_wizard.check_key(Answers(tmp_path, key=tmp_path / "agent")) is None


def test_files_are_written_whole_with_their_mode(tmp_path):
    path = tmp_path / ".env"
    write_atomically(path, "A=1\n", 0o600)  # gpu_rent/util/atomic.py, which setup writes .env with
    assert path.read_text() == "A=1\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [".env"]


def test_make_key_makes_an_ed25519_pair_readable_by_us_only(tmp_path):
    key = tmp_path / "id_ed25519"
    setup_wizard.make_key(key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.with_name("id_ed25519.pub").read_text().startswith("ssh-ed25519 ")
    public = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True)
    assert public.stdout.split()[1] == key.with_name("id_ed25519.pub").read_text().split()[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["id_ed25519", "id_ed25519.pub"]


@pytest.mark.parametrize("value", ["/plain/path", "/my keys/id #1", "it's", "back\\slash", "${HOME}"])
def test_env_values_read_back_as_written(tmp_path, value):
    (tmp_path / ".env").write_text(setup_wizard.env_text(tmp_path, {"GPU_RENT_SSH_KEY": value}))
    assert setup_wizard.existing_env(tmp_path)["GPU_RENT_SSH_KEY"] == value


def test_paths_typed_in_the_shell_are_relative_to_the_shell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    merged = setup_wizard.merged(Answers(tmp_path / "p", clouds_yaml=Path("c.yaml"), key=Path("k")))
    assert (merged.clouds_yaml, merged.key) == (tmp_path / "c.yaml", tmp_path / "k")


def test_a_broken_clouds_yaml_is_one_line_without_its_text(tmp_path, clouds):
    # openstacksdk skips a file it cannot parse: the cloud is then simply not there
    clouds.write_text('clouds:\n  test:\n    auth: {password: "s3cret-password\n')
    result = setup(tmp_path / "p", "--non-interactive", "--cloud", "test", "--clouds-yaml", str(clouds))
    assert result.exit_code == 2
    assert "--cloud test is not in" in result.output
    assert "s3cret" not in result.output


# ---------------------------------------------------------------------------------------------- typed OS_* values

URL = "http://127.0.0.1:9/v3"  # nothing listens: a login there is "did not answer"
PASSWORD = "s3cret-typed-pw"
TYPED = ["--auth-url", URL, "--username", "u", "--project-name", "proj"]
REST = ["--pool", "a", "--flavor", "f", "--image", "i", "--new-key"]


def setup_env(project: Path, *args: str, **env: str):
    return runner.invoke(app, ["setup", "--project", str(project), "--non-interactive", *args], env=env)


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--cloud", "c", "--auth-url", URL], {}, "--cloud and --auth-url: a clouds.yaml entry or typed OS_* values"),
        (["--application-credential-id", "x", "--username", "u"], {"OS_APPLICATION_CREDENTIAL_SECRET": "s"},
         "--application-credential-id and --username: an application credential carries its user and project"),
        (TYPED, {}, "OS_PASSWORD is required in the environment for typed OS_* values (never an option"),
        (["--auth-url", URL, "--application-credential-id", "x"], {},
         "OS_APPLICATION_CREDENTIAL_SECRET is required in the environment for an application credential"),
        (["--username", "u", "--project-name", "p"], {"OS_PASSWORD": PASSWORD}, "--auth-url is required"),
        (["--auth-url", URL, "--project-name", "p"], {"OS_PASSWORD": PASSWORD}, "--username is required"),
        (["--auth-url", "keystone:5000", "--username", "u", "--project-name", "p"], {"OS_PASSWORD": PASSWORD},
         "--auth-url keystone:5000: not an http(s) URL"),
        ([*TYPED, "--price-per-hour", "abc"], {"OS_PASSWORD": PASSWORD},
         "--price-per-hour abc: not a price (a number, 0 or more, e.g. 1.25)"),
    ],
)  # fmt: skip
def test_a_missing_or_contradicting_login_value_is_one_line_naming_it_exit_2(tmp_path, clouds, args, env, line):
    result = setup_env(tmp_path / "p", *args, *REST, **env)
    assert result.exit_code == 2, result.output
    assert line in " ".join(result.output.split())
    assert PASSWORD not in result.output
    assert not (tmp_path / "p").exists()


def test_a_typed_login_keystone_does_not_answer_is_exit_4_without_the_password(tmp_path, clouds):
    result = setup_env(tmp_path / "p", *TYPED, *REST, OS_PASSWORD=PASSWORD)
    assert result.exit_code == 4
    assert f"Keystone at {URL} refused the login or did not answer" in " ".join(result.output.split())
    assert PASSWORD not in result.output
    assert not (tmp_path / "p").exists()


def test_the_password_is_no_option():
    result = runner.invoke(app, ["setup", "--help"])
    assert "--password" not in result.output and "--application-credential-secret" not in result.output
    assert "OS_PASSWORD" in result.output


def test_a_refusal_never_quotes_the_secret(monkeypatch):
    auth = setup_login.check_login(setup_login.Login(setup_login.PASSWORD, URL, "u", PASSWORD, "p", "D", "D"))

    def connect(self):
        raise RuntimeError(f"bad request: password={PASSWORD}")

    monkeypatch.setattr(type(auth), "connect", connect)
    with pytest.raises(Exception, match="refused the login") as raised:
        setup_login.login(auth)
    assert PASSWORD not in str(raised.value) and "password=***" in str(raised.value)
    assert PASSWORD not in repr(auth) + repr(setup_login.Login(password=PASSWORD, credential_secret=PASSWORD))


def env_of(**values: str) -> dict[str, str]:
    return {k: v for k, v in values.items()}


def test_a_rerun_keeps_the_typed_values_and_the_environment_password_wins(tmp_path):
    stored = env_of(OS_AUTH_URL=URL, OS_USERNAME="u", OS_PASSWORD="old", OS_PROJECT_NAME="p", OS_REGION_NAME="R")
    login = setup_login.merged_login(setup_login.Login(password="new"), stored)
    assert (login.kind, login.username, login.password, login.region) == ("password", "u", "new", "R")
    assert (login.user_domain, login.project_domain) == ("Default", "Default")
    # a password in the shell does not turn a clouds.yaml project into typed values
    assert setup_login.merged_login(setup_login.Login(password="new"), {"OS_CLOUD": "c"}) is None
    # nothing typed, nothing stored: a clouds.yaml entry
    assert setup_login.merged_login(None, {}) is None


def test_another_kind_of_login_takes_nothing_of_the_stored_one_but_the_url(tmp_path):
    stored = env_of(OS_AUTH_URL=URL, OS_USERNAME="u", OS_PASSWORD="old", OS_PROJECT_NAME="p")
    login = setup_login.merged_login(setup_login.Login(credential_id="c1", credential_secret="s"), stored)
    assert login.kind == "v3applicationcredential"
    assert login.env() == {"OS_AUTH_URL": URL, "OS_AUTH_TYPE": "v3applicationcredential",
                           "OS_APPLICATION_CREDENTIAL_ID": "c1", "OS_APPLICATION_CREDENTIAL_SECRET": "s"}  # fmt: skip
    stored = env_of(OS_AUTH_URL=URL, OS_AUTH_TYPE="v3applicationcredential", OS_APPLICATION_CREDENTIAL_ID="c1")
    assert setup_login.merged_login(setup_login.Login(auth_url="http://other/v3"), stored).credential_id == "c1"


def checked_for(project: Path, **answers) -> setup_wizard.Checked:
    key = project / "k"
    key.write_text("key")
    defaults = {"pool": "a", "flavor": "f", "image": "i", "key": key}
    return setup_wizard.Checked(Answers(project, **{**defaults, **answers}), None, None, None)


def test_a_switch_of_login_leaves_no_line_of_the_other(tmp_path):
    (tmp_path / ".env").write_text(
        "# mine\nOS_CLOUD=c\nOS_CLIENT_CONFIG_FILE=/c.yaml\nOS_REGION_NAME=R\nOS_PROJECT_ID=x\nCIVITAI_TOKEN=t\n"
        "OS_INTERFACE=internal\n"
    )
    login = setup_login.Login(setup_login.PASSWORD, URL, "u", PASSWORD, "p", "Default", "Default")
    setup_wizard.write(checked_for(tmp_path, login=login))
    key = tmp_path / "k"
    assert (tmp_path / ".env").read_text() == (
        f"# mine\nCIVITAI_TOKEN=t\nOS_INTERFACE=internal\nOS_AUTH_URL={URL}\nOS_USERNAME=u\nOS_PASSWORD={PASSWORD}\n"
        f"OS_PROJECT_NAME=p\nOS_USER_DOMAIN_NAME=Default\nOS_PROJECT_DOMAIN_NAME=Default\nGPU_RENT_SSH_KEY={key}\n"
    )
    setup_wizard.write(checked_for(tmp_path, cloud="c"))  # back: the typed region goes with the typed login
    assert (tmp_path / ".env").read_text() == (
        f"# mine\nCIVITAI_TOKEN=t\nOS_INTERFACE=internal\nGPU_RENT_SSH_KEY={key}\nOS_CLOUD=c\n"
    )
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600


def test_beside_os_cloud_a_region_override_stays(tmp_path):
    (tmp_path / ".env").write_text("OS_CLOUD=c\nOS_REGION_NAME=R\n")
    setup_wizard.write(checked_for(tmp_path, cloud="d"))
    assert (tmp_path / ".env").read_text().startswith("OS_CLOUD=d\nOS_REGION_NAME=R\nGPU_RENT_SSH_KEY=")


@pytest.mark.parametrize(("price", "ok"), [("0", True), ("1.25", True), ("", True), ("-0.5", False), ("x", False)])
def test_price_is_a_number_0_or_more(price, ok):
    if ok:
        assert setup_wizard.check_price(price) == (price or None)
    else:
        with pytest.raises(ConfigError, match="--price-per-hour"):
            setup_wizard.check_price(price)


def test_price_and_fallbacks_take_the_commented_default_line(tmp_path):
    values = {"POOL": "p", "FLAVOR": "f", "IMAGE": "i", "PRICE_PER_HOUR": "2", "FLAVOR_FALLBACK": "g,h"}
    written = setup_wizard.vars_text(tmp_path, values).splitlines()
    example = EXAMPLE.read_text().splitlines()
    changed = {a: b for a, b in zip(example, written, strict=True) if a != b}
    assert changed["# PRICE_PER_HOUR="] == "PRICE_PER_HOUR=2"
    assert changed["# FLAVOR_FALLBACK="] == "FLAVOR_FALLBACK=g,h"
    (tmp_path / "gpu-rent.vars").write_text("\n".join(written) + "\n")
    again = setup_wizard.vars_text(tmp_path, {**values, "PRICE_PER_HOUR": None, "FLAVOR_FALLBACK": None})
    assert again.splitlines() == [b if "POOL" in a or "FLAVOR=" in a or "IMAGE=" in a else a
                                  for a, b in zip(example, written, strict=True)]  # fmt: skip


def test_a_rerun_keeps_the_price_and_fallbacks_unless_given(tmp_path):
    (tmp_path / "gpu-rent.vars").write_text("POOL=p\nFLAVOR=f\nIMAGE=i\nPRICE_PER_HOUR=1.5\nFLAVOR_FALLBACK=g, h\n")
    kept = setup_wizard.merged(Answers(tmp_path))
    assert (kept.price, kept.flavor_fallback) == ("1.5", ("g", "h"))
    cleared = setup_wizard.merged(Answers(tmp_path, price="", flavor_fallback=("",)))
    assert (cleared.price, cleared.flavor_fallback) == ("", ())


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("BOOT_VOLUME_GB=lots", "--set BOOT_VOLUME_GB=lots is not a whole number"),
        ("DATA_VOLUMES_GB=5", "--set unknown key DATA_VOLUMES_GB (did you mean DATA_VOLUME_GB?)"),
        ("FLAVOR=gpu.l4.1", "--set FLAVOR: setup asks for FLAVOR itself; use --flavor"),
        ("IDLE_MINUTES", "--set IDLE_MINUTES: expected KEY=VALUE"),
        ("LLM_RUNTIME=ollama", "--set LLM_RUNTIME: setup asks for LLM_RUNTIME itself; use --llm-runtime"),
    ],
)
def test_a_bad_set_is_one_line_exit_2_before_anything_is_asked(tmp_path, clouds, given, said):
    """Before the login: the cloud in clouds.yaml does not exist, and it is never reached."""
    project = tmp_path / "p"
    result = setup(project, "--non-interactive", "--cloud", "test", "--clouds-yaml", str(clouds), "--set", given)
    assert result.exit_code == 2, result.output
    assert said in result.output and len(result.output.strip().splitlines()) == 1
    assert not project.exists()


def test_a_key_given_twice_with_set_is_refused():
    with pytest.raises(ConfigError, match="--set IDLE_MINUTES: given twice"):
        setup_wizard.checked_settings(("IDLE_MINUTES=40", "idle_minutes=50"))


def test_set_values_replace_their_commented_defaults_and_an_empty_one_restores_it(tmp_path):
    values = setup_wizard.checked_settings(("data_volume_gb=200", "VOLUME_TYPE='fast.{pool}'", "IDLE_MINUTES="))
    # a value is written as it was given, quotes and all, so the file reads back what was checked
    assert values == {"DATA_VOLUME_GB": "200", "VOLUME_TYPE": "'fast.{pool}'", "IDLE_MINUTES": None}
    (tmp_path / "gpu-rent.vars").write_text("POOL=p\n# DATA_VOLUME_GB=100\nIDLE_MINUTES=45\n# VOLUME_TYPE=\n")
    text = setup_wizard.vars_text(tmp_path, values)
    assert text == "POOL=p\nDATA_VOLUME_GB=200\n# IDLE_MINUTES=\nVOLUME_TYPE='fast.{pool}'\n"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("KEEP_ALIVE_COMMAND=true\nOPERATOR_CIDR=0.0.0.0/0", "--set KEEP_ALIVE_COMMAND: the value holds a line break"),
        ("KEEP_ALIVE_COMMAND='pgrep x", "--set KEEP_ALIVE_COMMAND='pgrep x has an unmatched quote"),
        ("NAME=Bad Name", "--set NAME=Bad Name is not"),
    ],
)
def test_a_set_value_the_file_could_not_hold_is_refused(given, said):
    with pytest.raises(ConfigError, match=re.escape(said)):
        setup_wizard.checked_settings((given,))


def test_a_command_with_quotes_inside_is_written_as_given():
    assert setup_wizard.checked_settings(('KEEP_ALIVE_COMMAND="a" && "b"',)) == {"KEEP_ALIVE_COMMAND": '"a" && "b"'}


def _checked(project: Path, *settings: str, llm_runtime: str | None = None) -> setup_wizard.Checked:
    key = project / "id_ed25519"
    answers = Answers(project, cloud="c", pool="p", flavor="f", image="i", key=key, settings=settings,
                      llm_runtime=llm_runtime)  # fmt: skip
    return setup_wizard.Checked(answers, None, None, None)


def test_keys_that_clash_with_each_other_write_nothing(tmp_path):
    project = tmp_path / "p"
    with pytest.raises(ConfigError, match="LLM_LOCAL_PORT=17801 is LOCAL_PORT too"):
        setup_wizard.write(_checked(project, "LLM_LOCAL_PORT=17801", llm_runtime="ollama"))
    assert not project.exists()  # nor the starter ollama-models.yaml


def test_a_project_with_cloud_resources_keeps_its_name(tmp_path):
    project = tmp_path / "p"
    (project / ".gpu-rent").mkdir(parents=True)
    (project / ".gpu-rent" / "state.json").write_text('{"resources": {"boot_volume": "b1"}}')
    with pytest.raises(ConfigError, match="--set NAME: this project has cloud resources"):
        setup_wizard.write(_checked(project, "NAME=other"))
    assert not (project / "gpu-rent.vars").exists()


# ---------------------------------------------------------------------------------------------- LLM_RUNTIME


@pytest.fixture
def stand_in(tmp_path, clouds, monkeypatch) -> list:
    """setup on a stand-in cloud that accepts the login, its route public (OPERATOR_CIDR=auto resolves, nothing
    asked), doctor left out: the projects doctor would have run on."""
    monkeypatch.setattr(setup_login, "login", lambda auth: cloud())
    monkeypatch.setattr(config, "route_to", lambda host: tuple(ipaddress.ip_address(a) for a in PUBLIC_ROUTE))
    doctored = []
    monkeypatch.setattr(cli_setup, "doctor", doctored.append)
    (tmp_path / "key").write_text("key")
    return doctored


def setup_on_stand_in(tmp_path: Path, *args: str, folder: str = "p"):
    """gpu-rent setup --non-interactive in tmp_path/folder, every other answer one the stand-in cloud has."""
    given = ["--cloud", "test", "--clouds-yaml", str(tmp_path / "clouds.yaml"), "--key", str(tmp_path / "key")]
    cloud_answers = ["--pool", "ru-7a", "--flavor", "gpu.l4.1", "--image", IMAGE]
    return setup(tmp_path / folder, "--non-interactive", *given, *cloud_answers, *args)


def _files(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(project.iterdir())}


@pytest.mark.parametrize("runtime", ["ollama", "llamacpp"])
def test_an_llm_runtime_is_written_with_a_starter_models_file_that_lists_none(tmp_path, stand_in, runtime):
    project = tmp_path / "p"
    result = setup_on_stand_in(tmp_path, "--llm-runtime", runtime)
    assert result.exit_code == 0, result.output
    text = (project / "gpu-rent.vars").read_text()
    assert f"\nLLM_RUNTIME={runtime}\n" in text and "# LLM_RUNTIME=" not in text  # over the commented default
    models = project / llm_models.MODELS_FILE
    assert models.read_text() == setup_wizard.MODELS_STARTER
    assert stat.S_IMODE(models.stat().st_mode) == 0o644
    assert str(models) in result.output.split("wrote ")[1].split("\n")[0].split(", ")  # among the files written
    settings = config.load(project, with_cloud=False)
    assert (settings.llm_runtime, settings.llm_models) == (runtime, [])
    assert llm_models.load(project, "ollama") == llm_models.load(project, "llamacpp") == []
    assert stand_in == [project]


def test_the_starter_models_file_shows_examples_that_load_once_uncommented(tmp_path):
    text = setup_wizard.MODELS_STARTER
    assert "\n#   - llama3.2:1b" in text and "\n#   - name: qwen3:4b\n#     digest: sha256:" in text
    assert "llama-server serves the one\n# marked serve: true, and is not started while none is listed" in text
    # each part's commented lines switched on, the placeholders filled: what a user gets by uncommenting
    on = re.sub(r"(?m)^(ollama|llamacpp): \[\]$", r"\1:", text)
    on = re.sub(r"(?m)^#(   .*)$", r"\1", on).replace("<64 hex digits>", "ab" * 32).replace("<repo>", "o/r")
    (tmp_path / llm_models.MODELS_FILE).write_text(on)
    assert llm_models.load(tmp_path, "ollama") == [
        {"name": "llama3.2:1b", "digest": None, "insecure": False},
        {"name": "qwen3:4b", "digest": "sha256:" + "ab" * 32, "insecure": False},
    ]
    assert [m["name"] for m in llm_models.load(tmp_path, "llamacpp")] == ["model-Q4_K_M.gguf"]


def test_an_existing_models_file_is_kept_byte_for_byte(tmp_path, stand_in):
    project = tmp_path / "p"
    project.mkdir()
    mine = b"# my models\nollama:\n  - qwen3:4b   # the one I use\n"
    (project / llm_models.MODELS_FILE).write_bytes(mine)
    result = setup_on_stand_in(tmp_path, "--llm-runtime", "ollama")
    assert result.exit_code == 0, result.output
    assert (project / llm_models.MODELS_FILE).read_bytes() == mine
    assert llm_models.MODELS_FILE not in result.output
    assert [m["name"] for m in config.load(project, with_cloud=False).llm_models] == ["qwen3:4b"]


def test_an_unknown_llm_runtime_is_one_line_exit_2_and_nothing_written(tmp_path, stand_in):
    assert setup_on_stand_in(tmp_path, "--llm-runtime", "ollama").exit_code == 0  # a project to keep as it is
    project = tmp_path / "p"
    before = _files(project)
    result = setup_on_stand_in(tmp_path, "--llm-runtime", "vllm", "--flavor", "gpu.a100.1")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: setup: --llm-runtime vllm: not an LLM runtime (choices: none, ollama, llamacpp)"
    )
    assert _files(project) == before and stand_in == [project]  # doctor ran for the first run only


def test_without_the_option_the_projects_llm_runtime_stays(tmp_path, stand_in):
    project = tmp_path / "p"
    assert setup_on_stand_in(tmp_path, "--llm-runtime", "llamacpp").exit_code == 0
    result = setup_on_stand_in(tmp_path, "--flavor", "gpu.a100.1")
    assert result.exit_code == 0, result.output
    settings = config.load(project, with_cloud=False)
    assert (settings.flavor, settings.llm_runtime) == ("gpu.a100.1", "llamacpp")
    # none, given, is written too
    assert setup_on_stand_in(tmp_path, "--llm-runtime", "none").exit_code == 0
    assert "\nLLM_RUNTIME=none\n" in (project / "gpu-rent.vars").read_text()
    # a project without LLM_RUNTIME, nor the option: the commented default stays, no models file beside it
    other = tmp_path / "q"
    result = setup_on_stand_in(tmp_path, folder="q")
    assert result.exit_code == 0, result.output
    assert "\n# LLM_RUNTIME=none\n" in (other / "gpu-rent.vars").read_text()
    assert sorted(p.name for p in other.iterdir()) == [".env", "gpu-rent.vars"]
