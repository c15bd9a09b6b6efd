"""The interactive gpu-rent setup without a cloud: scripted answers, a stand-in cloud listing, an injected login.

One file past 500 lines: every test drives the same scripted dialogue from the first question to the last
(the stand-in cloud, the script builders, the injected login); split by question, each file would repeat them.
"""

import io
import ipaddress
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from openstack.exceptions import ForbiddenException
from rich.console import Console
from typer.testing import CliRunner

from gpu_rent.cli import setup as cli_setup
from gpu_rent.cli.app import app
from gpu_rent.cloud.connect import CloudUnreachable
from gpu_rent.project import settings as config
from gpu_rent.project.settings import load
from gpu_rent.setup import login as setup_login
from gpu_rent.setup import prompts as setup_prompts
from gpu_rent.setup import wizard as setup_wizard
from gpu_rent.setup.prompts import Choice, Prompter, pick
from gpu_rent.setup.wizard import Answers

FLAVORS = [
    {"id": "f-small", "name": "m1.small", "vcpus": 1, "ram": 2048, "extra_specs": {}},
    {"id": "f-a100", "name": "gpu.a100.1", "vcpus": 8, "ram": 65536, "extra_specs": {"pci_passthrough:alias": "A100"}},
    {"id": "f-l4", "name": "gpu.l4.1", "vcpus": 4, "ram": 16384, "extra_specs": {"pci_passthrough:alias": "GPU-L4:1"}},
]
IMAGE = "Debian 12 GPU optimized"
IMAGES = [
    {"id": "i-deb", "name": "Debian 12", "status": "active", "properties": {}},
    {"id": "i-gpu", "name": "Debian 12 GPU optimized", "status": "active", "properties": {}},
]


def catalog(regions) -> SimpleNamespace | None:
    """A login's service catalog as keystoneauth shows it: compute endpoints, one per region."""
    if not regions:
        return None
    endpoints = {"compute": [SimpleNamespace(region_name=r) for r in regions]}
    return SimpleNamespace(get_endpoints_data=lambda service_type=None: endpoints)


def token(credential: str | None = None, restricted: bool | None = None) -> SimpleNamespace:
    """A login's token as keystoneauth shows it: the application credential it used (None: a password's)."""
    used = None if credential is None else {"id": credential, "name": "n", "restricted": restricted}
    return SimpleNamespace(application_credential_id=credential, application_credential=used, user_id="user-1")


def cloud(zones=("ru-7a", "ru-7b"), flavors=FLAVORS, images=IMAGES, regions=(), access=None) -> SimpleNamespace:
    """The few calls setup makes, answered from lists: the shape openstacksdk's objects have."""
    access = access or token()
    return SimpleNamespace(
        session=SimpleNamespace(auth=SimpleNamespace(get_access=lambda session: access)),
        compute=SimpleNamespace(
            availability_zones=lambda: [SimpleNamespace(name=z) for z in zones],
            flavors=lambda details=True: [SimpleNamespace(**f) for f in flavors],
        ),
        image=SimpleNamespace(images=lambda: [SimpleNamespace(**i) for i in images]),
        config=SimpleNamespace(get_service_catalog=lambda: catalog(regions)),
        close=lambda: None,
    )


# this machine's address on the route to the cloud, and the cloud's: public ones, so OPERATOR_CIDR=auto resolves
PUBLIC_ROUTE = ("81.2.69.142", "93.184.216.34")
NAT_ROUTE = ("192.168.1.20", "93.184.216.34")  # behind a home router, the cloud on the internet
GROUND_ROUTE = ("127.0.0.1", "127.0.0.1")  # the test ground: its Keystone on loopback, a private network


@pytest.fixture(autouse=True)
def route(monkeypatch):
    """The route setup finds to the cloud (config's, which OPERATOR_CIDR=auto takes): PUBLIC_ROUTE, so no address is
    asked, unless a test sets route[:] = NAT_ROUTE or GROUND_ROUTE."""
    way = list(PUBLIC_ROUTE)
    monkeypatch.setattr(config, "route_to", lambda host: tuple(ipaddress.ip_address(a) for a in way))
    return way


class Script:
    """The user: answers in order, each after its prompt; an exception instance is raised instead (Ctrl+C)."""

    def __init__(self, *answers):
        self.answers, self.prompts = list(answers), []

    def __call__(self, prompt: str = "") -> str:  # builtins.input as Rich calls it: the prompt printed already
        self.prompts.append(prompt)
        assert self.answers, f"asked more than scripted: {prompt}"
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def prompter(script: Script) -> tuple[Prompter, io.StringIO]:
    shown = io.StringIO()
    return Prompter(Console(file=shown, width=200), Console(file=shown, width=200), script), shown


@pytest.fixture
def clouds(tmp_path: Path, monkeypatch, clouds_yaml) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ssh/id_ed25519 unless a test makes one
    return clouds_yaml(good="s3cret-good", wrong="s3cret-wrong")


def logins(refused=("wrong",), conn=None):
    """A login that Keystone refuses for the named clouds; the tries, in order."""
    tried = []

    def login(auth):
        tried.append(auth.cloud)
        if auth.cloud in refused:
            raise CloudUnreachable(f"cloud {auth.cloud!r} refused the login or did not answer: HTTP 401")
        return conn or cloud()

    return login, tried


def ask(project: Path, clouds: Path, script: Script, login=None, **given):
    p, shown = prompter(script)
    checked = setup_prompts.ask(Answers(project, clouds_yaml=clouds, **given), p, login or logins()[0])
    return checked, shown.getvalue()


# ---------------------------------------------------------------------------------------------- picking

CHOICES = [Choice("gpu.l4.1", "gpu.l4.1 (...)", ("f-l4",)), Choice("1311", "1311 (...)"), Choice("x", "x")]


@pytest.mark.parametrize(
    ("answer", "picked"),
    [("1", "gpu.l4.1"), ("3", "x"), ("gpu.l4.1", "gpu.l4.1"), ("f-l4", "f-l4"), ("1311", "1311"),
     ("0", None), ("4", None), ("gpu", None), ("", None)],
)  # fmt: skip
def test_an_answer_is_a_list_number_or_a_name_or_id_as_typed(answer, picked):
    assert pick(CHOICES, answer) == picked


def test_a_wrong_answer_is_one_line_and_asks_again_and_enter_takes_the_default():
    script = Script("9", "")
    p, shown = prompter(script)
    assert setup_prompts.choose(p, "Pick", CHOICES, "x") == "x"
    assert "9: not in the list; a number from 1 to 3" in shown.getvalue()
    assert script.prompts == ["number or name [cyan]\\[x][/]: "] * 2


def test_a_default_not_in_the_list_is_no_default():
    p, _ = prompter(script := Script("", "2"))
    assert setup_prompts.choose(p, "Pick", CHOICES, "gone") == "1311"
    assert script.prompts == ["number or name: "] * 2


# ---------------------------------------------------------------------------------------------- the questions


def test_a_fresh_project_walks_every_question_and_is_checked(tmp_path, clouds):
    project = tmp_path / "p"
    checked, shown = ask(project, clouds, Script("good", "ru-7a", "gpu.l4.1", "", "", "1", "new", ""))
    a = checked.answers
    assert (a.cloud, a.pool, a.flavor, a.image) == ("good", "ru-7a", "gpu.l4.1", "Debian 12 GPU optimized")
    assert a.key == project / "id_ed25519" and a.new_key and checked.key_to_make == project / "id_ed25519"
    assert checked.flavor.gpu_count == 1 and checked.flavor.gpu_model == "L4"
    assert 'logged in: cloud "good" (http://127.0.0.1:9/v3), project p' in shown
    assert not project.exists()  # asking writes nothing
    assert "s3cret" not in shown


def test_non_gpu_flavors_are_never_offered_nor_taken(tmp_path, clouds):
    script = Script("good", "1", "m1.small", "f-small", "2", "", "", "1", "new", "")
    checked, shown = ask(tmp_path / "p", clouds, script)
    flavors = shown.split("GPU flavor")[1].split("Image")[0]
    assert "m1.small" not in flavors.split("error")[0]
    assert "1. gpu.l4.1 (1× L4, 4 vCPU, 16 GB)" in flavors and "2. gpu.a100.1 (1× A100, 8 vCPU, 64 GB)" in flavors
    assert flavors.count("not in the list") == 2  # by name and by id: both refused
    assert checked.answers.flavor == "gpu.a100.1"


def test_gpu_images_come_first(tmp_path, clouds):
    _, shown = ask(tmp_path / "p", clouds, Script("good", "1", "1", "", "", "2", "new", ""))
    images = shown.split("Image (GPU images first)")[1]
    assert images.index("1. Debian 12 GPU optimized") < images.index("2. Debian 12\n")


def test_a_refused_login_is_one_line_and_the_cloud_is_picked_again(tmp_path, clouds):
    login, tried = logins()
    checked, shown = ask(tmp_path / "p", clouds, Script("wrong", "", "good", "1", "1", "", "", "1", "new", ""), login)
    assert tried == ["wrong", "good"]
    assert shown.count("refused the login") == 1
    assert shown.count("Cloud (clouds.yaml: ") == 2  # the list again, to pick another
    assert checked.answers.cloud == "good" and "s3cret" not in shown


def test_the_login_comes_before_any_other_question(tmp_path, clouds):
    script = Script("wrong", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        ask(tmp_path / "p", clouds, script, logins()[0])
    assert "Pool" not in "".join(script.prompts) and len(script.prompts) == 2


def test_three_refused_logins_end_it_with_the_last_refusal(tmp_path, clouds):
    login, tried = logins(refused=("wrong", "good"))
    with pytest.raises(CloudUnreachable, match="refused the login"):
        ask(tmp_path / "p", clouds, Script("wrong", "good", "wrong"), login)
    assert tried == ["wrong", "good", "wrong"]


def test_without_a_clouds_yaml_entry_the_typed_logins_are_offered(tmp_path, clouds):
    clouds.write_text("clouds: {}\n")
    script = Script(KeyboardInterrupt())
    p, shown = prompter(script)
    with pytest.raises(KeyboardInterrupt):
        setup_prompts.ask(Answers(tmp_path / "p", clouds_yaml=clouds), p, logins()[0])
    assert f"Cloud (no clouds.yaml entry in {clouds})\n  1. os-values: type the OS_* values" in shown.getvalue()
    assert "  2. app-credential: an application credential" in shown.getvalue()


def test_pools_with_gpu_flavors_are_marked_when_the_flavors_say(tmp_path, clouds):
    zoned = [*FLAVORS, {**FLAVORS[2], "id": "f-l4b", "name": "gpu.l4.2", "extra_specs": {
        "pci_passthrough:alias": "GPU-L4:2", "aggregate_instance_extra_specs:availability_zone": "ru-7b"}}]  # fmt: skip
    login, _ = logins(conn=cloud(flavors=zoned))
    _, shown = ask(tmp_path / "p", clouds, Script("good", "2", "1", "", "", "1", "new", ""), login)
    assert "Pool (availability zone), * has GPU flavors\n  1. ru-7a\n  2. ru-7b *\n" in shown
    _, plain = ask(tmp_path / "q", clouds, Script("good", "2", "1", "", "", "1", "new", ""))
    assert "Pool (availability zone)\n  1. ru-7a\n  2. ru-7b\n" in plain


def test_a_missing_key_is_refused_and_asked_again(tmp_path, clouds):
    script = Script("good", "1", "1", "", "", "1", str(tmp_path / "nope"), "", "")
    checked, shown = ask(tmp_path / "p", clouds, script)
    assert "[cyan]\\[new][/]" in script.prompts[6]  # no ~/.ssh/id_ed25519 here: new is the default
    assert f"{tmp_path / 'nope'}: no such key" in shown
    assert checked.key_to_make == tmp_path / "p" / "id_ed25519"


def test_the_usual_key_is_the_default_when_it_is_there(tmp_path, clouds):
    usual = tmp_path / "home" / ".ssh" / "id_ed25519"
    usual.parent.mkdir(parents=True)
    usual.write_text("key")
    checked, _ = ask(tmp_path / "p", clouds, Script("good", "1", "1", "", "", "1", "", ""))
    assert checked.answers.key == usual and checked.key_to_make is None and not checked.answers.new_key


def written_project(tmp_path: Path, clouds: Path) -> Path:
    project = tmp_path / "p"
    checked, _ = ask(project, clouds, Script("good", "ru-7b", "gpu.a100.1", "", "", IMAGE, "new", ""))
    setup_wizard.write(checked)
    return project


def test_a_rerun_offers_the_project_values_and_enter_keeps_them_byte_for_byte(tmp_path, clouds):
    project = written_project(tmp_path, clouds)
    files = {name: (project / name).read_bytes() for name in (".env", "gpu-rent.vars", "id_ed25519")}
    script = Script("", "", "", "", "", "", "", "")
    checked, _ = ask(project, None, script)  # no clouds.yaml given: .env's OS_CLIENT_CONFIG_FILE
    defaults = [p.split("\\[")[1].split("]")[0] if "\\[" in p else None for p in script.prompts]
    assert defaults == ["good", "ru-7b", "gpu.a100.1", None, None, IMAGE, str(project / "id_ed25519"), "none"]
    assert checked.key_to_make is None
    setup_wizard.write(checked)
    assert {name: (project / name).read_bytes() for name in files} == files


def test_a_rerun_changes_only_what_is_changed(tmp_path, clouds):
    project = written_project(tmp_path, clouds)
    env = (project / ".env").read_bytes()
    checked, _ = ask(project, None, Script("", "", "gpu.l4.1", "", "", "", "", ""))
    setup_wizard.write(checked)
    assert (project / ".env").read_bytes() == env
    assert setup_wizard.existing_vars(project) == {
        "POOL": "ru-7b", "FLAVOR": "gpu.l4.1", "IMAGE": IMAGE, "LLM_RUNTIME": "none"}  # fmt: skip


def test_the_price_is_shown_beside_the_flavor_it_is_the_price_of(tmp_path, clouds):
    project = written_project(tmp_path, clouds)
    with (project / "gpu-rent.vars").open("a") as f:
        f.write("PRICE_PER_HOUR=1.35\n")
    script = Script("", "", "gpu.l4.1", "", "", "", "", "")
    checked, shown = ask(project, None, script)
    assert "gpu.a100.1 (1× A100, 8 vCPU, 64 GB), 1.35/hour" in shown
    assert "gpu.l4.1 (1× L4, 4 vCPU, 16 GB)\n" in shown
    # another flavor's price is no default: Enter leaves the new flavor's unset
    assert "PRICE_PER_HOUR=1.35 in gpu-rent.vars was gpu.a100.1's" in shown
    assert script.prompts[3] == "price per hour of gpu.l4.1 (Enter to leave unset): "
    assert checked.answers.price is None


# ---------------------------------------------------------------------------------------------- the command

runner = CliRunner()


@pytest.fixture
def at_a_terminal(monkeypatch):
    """The command as on a terminal: stdin a tty, the login accepted, doctor (a cloud call) left out."""
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(setup_login, "login", logins()[0])
    doctored = []
    monkeypatch.setattr(cli_setup, "doctor", doctored.append)
    return doctored


def setup_at_a_terminal(monkeypatch, project: Path, *answers, clouds: Path | None = None) -> int:
    """The setup command as the shell calls it (its other options at their defaults); its exit code."""
    monkeypatch.setattr("builtins.input", Script(*answers))
    try:
        cli_setup.setup(project=project, clouds_yaml=clouds)
    except typer.Exit as e:
        return e.exit_code
    return 0


def test_the_command_asks_writes_runs_doctor_and_says_what_next(tmp_path, clouds, monkeypatch, capsys, at_a_terminal):
    project = tmp_path / "p"
    assert setup_at_a_terminal(monkeypatch, project, "good", "1", "1", "", "", "1", "new", "", clouds=clouds) == 0
    assert f"next: gpu-rent up --project {project}" in capsys.readouterr().out
    assert at_a_terminal == [project]
    assert sorted(p.name for p in project.iterdir()) == [".env", "gpu-rent.vars", "id_ed25519", "id_ed25519.pub"]


def test_ctrl_c_at_a_prompt_writes_nothing_and_exits_130(tmp_path, clouds, monkeypatch, capsys, at_a_terminal):
    project = tmp_path / "p"
    assert setup_at_a_terminal(monkeypatch, project, "good", "1", KeyboardInterrupt(), clouds=clouds) == 130
    assert "canceled: nothing written" in capsys.readouterr().err
    assert not project.exists() and at_a_terminal == []


def test_ctrl_c_in_a_project_changes_none_of_its_files(tmp_path, clouds, monkeypatch, at_a_terminal):
    project = written_project(tmp_path, clouds)
    files = {p: p.read_bytes() for p in project.iterdir()}
    assert setup_at_a_terminal(monkeypatch, project, "", "2", "gpu.l4.1", "", "", "1", KeyboardInterrupt()) == 130
    assert {p: p.read_bytes() for p in project.iterdir()} == files


def test_three_refused_logins_exit_4(tmp_path, clouds, monkeypatch, capsys, at_a_terminal):
    monkeypatch.setattr(setup_login, "login", logins(refused=("good", "wrong"))[0])
    assert setup_at_a_terminal(monkeypatch, tmp_path / "p", "good", "wrong", "good", clouds=clouds) == 4
    shown = capsys.readouterr()
    assert shown.err.count("refused the login") == 3
    assert "s3cret" not in shown.out + shown.err and "Traceback" not in shown.err
    assert not (tmp_path / "p").exists()


def test_without_a_terminal_it_names_the_non_interactive_form(tmp_path):
    result = runner.invoke(app, ["setup", "--project", str(tmp_path)])
    assert result.exit_code == 2
    assert "no terminal to ask on: use gpu-rent setup --non-interactive --cloud NAME" in result.output
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- typed logins

PASSWORD = "s3cret-typed-pw"
SECRET = "s3cret-app-secret"
URL = "http://127.0.0.1:9/v3"
# the questions after the login, answered for a fresh project: pool, flavor, price, fallbacks, image, key, LLM runtime
REST = ("ru-7a", "gpu.l4.1", "", "", "1", "new", "")


class Hidden:
    """The hidden reads of a script: the same answers in order, each prompt noted as one typed without echo."""

    def __init__(self, script: Script):
        self.script, self.prompts = script, []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.script(prompt)


def typed_logins(refused=("wrong",), regions=()):
    """A Keystone that refuses the named passwords or secrets; the logins tried, as (auth_url, user, region)."""
    tried = []

    def login(auth):
        options = dict(auth.options)
        tried.append((options.get("auth_url"), options.get("username"), options.get("region_name")))
        if (options.get("password") or options.get("application_credential_secret")) in refused:
            raise CloudUnreachable(f"Keystone at {options['auth_url']} refused the login or did not answer: HTTP 401")
        return cloud(regions=regions)

    return login, tried


def ask_typed(project: Path, script: Script, login=None, clouds: Path | None = None, **given):
    hidden = Hidden(script)
    shown = io.StringIO()
    p = Prompter(Console(file=shown, width=200), Console(file=shown, width=200), script, hidden)
    checked = setup_prompts.ask(Answers(project, clouds_yaml=clouds, **given), p, login or typed_logins()[0])
    return checked, shown.getvalue(), hidden.prompts


def typed_answers(password=PASSWORD, region=""):
    return ("os-values", URL, "u", password, "proj", "", "", region)


def test_typed_os_values_log_in_and_write_what_config_reads(tmp_path, clouds):
    project = tmp_path / "p"
    login, tried = typed_logins()
    checked, shown, hidden = ask_typed(project, Script(*typed_answers(), *REST), login, clouds)
    assert hidden == ["password (hidden): "]  # the password alone is read without echo
    assert tried == [(URL, "u", None)]
    assert "logged in: OS_AUTH_URL (http://127.0.0.1:9/v3), project proj" in shown
    assert checked.answers.cloud is None and checked.answers.login.username == "u"
    assert PASSWORD not in shown + repr(checked) + repr(checked.answers)
    setup_wizard.write(checked)
    env = (project / ".env").read_text()
    assert f"OS_AUTH_URL={URL}\nOS_USERNAME=u\nOS_PASSWORD={PASSWORD}\nOS_PROJECT_NAME=proj\n" in env
    assert "OS_USER_DOMAIN_NAME=Default\nOS_PROJECT_DOMAIN_NAME=Default\nGPU_RENT_SSH_KEY=" in env
    assert "OS_CLOUD" not in env and "OS_REGION_NAME" not in env
    auth = load(project).cloud.ansible_params()
    assert auth["auth"] == {
        "auth_url": URL, "username": "u", "password": PASSWORD, "project_name": "proj",
        "user_domain_name": "Default", "project_domain_name": "Default",
    }  # fmt: skip


def test_an_application_credential_logs_in_and_writes_what_config_reads(tmp_path, clouds):
    project = tmp_path / "p"
    script = Script("app-credential", URL, "cred-1", SECRET, "", *REST)
    checked, shown, hidden = ask_typed(project, script, clouds=clouds)
    assert hidden == ["application credential secret (hidden): "]
    assert SECRET not in shown + repr(checked)
    setup_wizard.write(checked)
    env = (project / ".env").read_text()
    assert f"OS_AUTH_URL={URL}\nOS_AUTH_TYPE=v3applicationcredential\nOS_APPLICATION_CREDENTIAL_ID=cred-1\n" in env
    assert f"OS_APPLICATION_CREDENTIAL_SECRET={SECRET}\n" in env
    params = load(project).cloud.ansible_params()
    assert params["auth_type"] == "v3applicationcredential"
    assert params["auth"] == {"auth_url": URL, "application_credential_id": "cred-1",
                              "application_credential_secret": SECRET}  # fmt: skip


def test_a_refused_password_is_one_line_and_the_typed_values_stay_the_defaults(tmp_path, clouds):
    login, tried = typed_logins(refused=("typo-pw-77",))
    # refused; the list again (Enter: os-values), then Enter for every value but the password, typed again
    script = Script(*typed_answers(password="typo-pw-77"), "", "", "", PASSWORD, "", "", "", "", *REST)
    checked, shown, hidden = ask_typed(tmp_path / "p", script, login, clouds)
    assert [t[1] for t in tried] == ["u", "u"]
    assert shown.count("refused the login") == 1 and shown.count("error:") == 1
    assert hidden == ["password (hidden): "] * 2  # the refused one is no default: Enter must not send it again
    assert "username [cyan]\\[u][/]: " in script.prompts
    assert checked.answers.login.password == PASSWORD
    assert "typo-pw-77" not in shown + "".join(script.prompts)


def test_three_refused_typed_logins_end_it(tmp_path, clouds):
    login, tried = typed_logins(refused=("w1", "w2", "w3"))
    script = Script(*typed_answers("w1"), "", "", "", "w2", "", "", "", "", "", "", "", "w3", "", "", "", "")
    with pytest.raises(CloudUnreachable, match="refused the login"):
        ask_typed(tmp_path / "p", script, login, clouds)
    assert len(tried) == 3


def test_a_bad_auth_url_or_an_empty_value_is_one_line_and_asked_again(tmp_path, clouds):
    script = Script("os-values", "keystone:5000", URL, "", "u", "", PASSWORD, "proj", "", "", "", *REST)
    checked, shown, _ = ask_typed(tmp_path / "p", script, clouds=clouds)
    assert "keystone:5000: not an http(s) URL" in shown
    assert "username: required" in shown and "password: required" in shown
    assert checked.answers.login.auth_url == URL


def test_the_region_comes_from_the_catalog(tmp_path, clouds):
    login, tried = typed_logins(regions=("ru-1", "ru-7"))
    # none typed and two in the catalog: picked from them; then a second login in that region
    checked, shown, _ = ask_typed(tmp_path / "p", Script(*typed_answers(), "2", *REST), login, clouds)
    assert "Region (from the cloud's catalog)\n  1. ru-1\n  2. ru-7\n" in shown
    assert checked.answers.login.region == "ru-7" and tried[-1] == (URL, "u", "ru-7")
    # one in the catalog: taken without a question
    login, _ = typed_logins(regions=("RegionOne",))
    checked, shown, _ = ask_typed(tmp_path / "q", Script(*typed_answers(), *REST), login, clouds)
    assert checked.answers.login.region == "RegionOne" and "region: RegionOne" in shown
    # typed but not in the catalog: one line, then the catalog's
    login, _ = typed_logins(regions=("ru-1", "ru-7"))
    checked, shown, _ = ask_typed(tmp_path / "r", Script(*typed_answers(region="ru-9"), "ru-1", *REST), login, clouds)
    assert "region ru-9: not in the cloud's catalog (regions: ru-1, ru-7)" in shown
    assert checked.answers.login.region == "ru-1"


def test_a_rerun_offers_the_typed_values_and_enter_keeps_the_password_unseen(tmp_path, clouds):
    project = tmp_path / "p"
    (project / "sub").mkdir(parents=True)
    checked, _, _ = ask_typed(project, Script(*typed_answers(region="RegionOne"), *REST), clouds=clouds)
    setup_wizard.write(checked)
    files = {name: (project / name).read_bytes() for name in (".env", "gpu-rent.vars")}
    script = Script(*[""] * 15)
    checked, shown, hidden = ask_typed(project, script, clouds=clouds)
    assert script.prompts[0] == "number or name [cyan]\\[os-values][/]: "
    assert script.prompts[1].endswith(f"[cyan]\\[{URL}][/]: ")
    assert script.prompts[3] == "password (hidden; Enter keeps the stored one): "
    assert script.prompts[5] == "user domain [cyan]\\[Default][/]: "
    assert script.prompts[7] == "region (Enter: the one the catalog has) [cyan]\\[RegionOne][/]: "
    assert hidden == ["password (hidden; Enter keeps the stored one): "]
    assert PASSWORD not in shown + "".join(script.prompts)
    setup_wizard.write(checked)
    assert {name: (project / name).read_bytes() for name in files} == files


def test_switching_the_kind_of_login_rewrites_env_cleanly(tmp_path, clouds):
    project = written_project(tmp_path, clouds)  # a clouds.yaml entry
    with (project / ".env").open("a") as f:
        f.write("# my token\nCIVITAI_TOKEN=tok\nOS_CACERT=/etc/ca.pem\n")
    checked, _, _ = ask_typed(project, Script(*typed_answers(), "", "", "", "", "", "", ""))
    setup_wizard.write(checked)
    env = (project / ".env").read_text()
    assert "OS_CLOUD" not in env and "OS_CLIENT_CONFIG_FILE" not in env
    assert "# my token\nCIVITAI_TOKEN=tok\nOS_CACERT=/etc/ca.pem\n" in env and "OS_PASSWORD=" in env
    # a password login to an application credential: no user, password or project left beside it
    checked, _, _ = ask_typed(project, Script("app-credential", "", "cred-1", SECRET, "", "", "", "", "", "", "", ""))
    setup_wizard.write(checked)
    env = (project / ".env").read_text()
    for gone in ("OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_USER_DOMAIN_NAME", "OS_CLOUD"):
        assert gone not in env
    assert f"OS_AUTH_URL={URL}\n" in env and "OS_APPLICATION_CREDENTIAL_ID=cred-1\n" in env
    # and back to the clouds.yaml entry: no OS_* value of the typed login stays
    checked, _ = ask(project, clouds, Script("good", "", "", "", "", "", "", ""))
    setup_wizard.write(checked)
    env = (project / ".env").read_text()
    assert [line.split("=")[0] for line in env.splitlines() if line.startswith("OS_")] == [
        "OS_CACERT", "OS_CLOUD", "OS_CLIENT_CONFIG_FILE"]  # fmt: skip
    assert "CIVITAI_TOKEN=tok" in env and load(project).cloud.cloud == "good"


# ---------------------------------------------------------------------------------------------- price, fallbacks


@pytest.mark.parametrize("bad", ["abc", "-1", "inf", "nan", "1,5"])
def test_a_price_that_is_not_a_number_0_or_more_is_one_line_and_asked_again(tmp_path, clouds, bad):
    checked, shown = ask(tmp_path / "p", clouds, Script("good", "1", "gpu.l4.1", bad, "1.25", "", "1", "new", ""))
    assert f"{bad}: not a price; a number, 0 or more, e.g. 1.25" in shown
    assert checked.answers.price == "1.25"


def test_price_and_fallbacks_are_written_where_the_example_shows_them(tmp_path, clouds):
    project = tmp_path / "p"
    script = Script("good", "1", "gpu.l4.1", "0.9", "1", "x", "2", "1", "new", "")
    checked, shown = ask(project, clouds, script)
    assert "price per hour of gpu.l4.1 (Enter to leave unset): " in script.prompts
    assert "1: is the flavor itself" in shown and "x: not in the GPU flavor list" in shown
    setup_wizard.write(checked)
    text = (project / "gpu-rent.vars").read_text()
    assert "# Price of the flavor per hour, for the cost shown by up and status; a number such as 1.25.\n" \
           "PRICE_PER_HOUR=0.9\n" in text  # fmt: skip
    assert "comma-separated.\nFLAVOR_FALLBACK=gpu.a100.1\n" in text
    settings = load(project)
    assert settings.price_per_hour == 0.9 and settings.flavors() == ("gpu.l4.1", "gpu.a100.1")
    # a re-run offers both; none unsets them, back to their commented default
    script = Script("", "", "", "none", "none", "", "", "")
    checked, shown = ask(project, None, script)
    assert "price per hour of gpu.l4.1 (none: unset) [cyan]\\[0.9][/]: " in script.prompts
    assert "(numbers or names, none: no fallback) [cyan]\\[gpu.a100.1][/]: " in script.prompts[4]
    setup_wizard.write(checked)
    text = (project / "gpu-rent.vars").read_text()
    assert "\n# PRICE_PER_HOUR=\n" in text and "\n# FLAVOR_FALLBACK=\n" in text
    assert "PRICE_PER_HOUR=0.9" not in text


def test_one_gpu_flavor_asks_no_fallback(tmp_path, clouds):
    login, _ = logins(conn=cloud(flavors=FLAVORS[:2]))
    checked, _ = ask(tmp_path / "p", clouds, Script("good", "1", "1", "", "1", "new", ""), login)
    assert checked.answers.flavor_fallback == ()


# ---------------------------------------------------------------------------------------------- OPERATOR_CIDR

ASKED_BEHIND_NAT = (
    "Your public IP address, for SSH to the VM (this machine reaches the cloud from 192.168.1.20, a private address; "
    "your router's public address is shown by e.g. https://ifconfig.me or your router's page): "
)


def test_behind_nat_the_public_address_is_asked_after_the_key_and_written_over_the_commented_line(
    tmp_path, clouds, route
):
    route[:] = NAT_ROUTE
    project = tmp_path / "p"
    addresses = ("192.168.1.20", "", "127.0.0.1", "0.0.0.0/0", "81.2.69.142")
    script = Script("good", "1", "1", "", "", "1", "new", *addresses, "")
    checked, shown = ask(project, clouds, script)
    assert script.prompts[-2] == ASKED_BEHIND_NAT  # the LLM runtime is the last question
    refused = [line for line in shown.splitlines() if line.startswith("error:")]
    assert [line.split(":")[1].strip() for line in refused] == ["192.168.1.20", "an address is required", "127.0.0.1",
                                                                 "0.0.0.0/0"]  # fmt: skip
    assert "a private address: the cloud sees this machine from its router's address" in refused[0]
    assert checked.answers.operator_cidr == "81.2.69.142/32"  # a bare address: /32
    setup_wizard.write(checked)
    text = (project / "gpu-rent.vars").read_text()
    assert "# OPERATOR_CIDR=auto" not in text
    assert "or an address/network such as 203.0.113.7/32.\nOPERATOR_CIDR=81.2.69.142/32\n" in text
    assert load(project).operator_cidr == "81.2.69.142/32"
    # a re-run offers the project's address; Enter keeps the file as it is
    files = {name: (project / name).read_bytes() for name in (".env", "gpu-rent.vars")}
    script = Script(*[""] * 9)
    checked, _ = ask(project, None, script)
    assert script.prompts[-2] == ASKED_BEHIND_NAT.replace("): ", ") [cyan]\\[81.2.69.142/32][/]: ")
    setup_wizard.write(checked)
    assert {name: (project / name).read_bytes() for name in files} == files


def test_where_auto_resolves_nothing_is_asked_and_the_line_stays(tmp_path, clouds):
    project = tmp_path / "p"
    checked, _ = ask(project, clouds, script := Script("good", "1", "1", "", "", "1", "new", ""))
    assert not any("IP address" in prompt for prompt in script.prompts)
    setup_wizard.write(checked)
    assert "\n# OPERATOR_CIDR=auto\n" in (project / "gpu-rent.vars").read_text()


def test_on_a_private_cloud_a_private_address_is_taken_a_loopback_one_not(tmp_path, clouds, route):
    route[:] = GROUND_ROUTE
    script = Script("good", "1", "1", "", "", "1", "new", "127.0.0.1", "10.231.7.1", "")
    checked, shown = ask(tmp_path / "p", clouds, script)
    assert "127.0.0.1, a loopback address; the cloud, at 127.0.0.1, is on a private network too" in script.prompts[-2]
    assert "127.0.0.1: a loopback address" in shown
    assert checked.answers.operator_cidr == "10.231.7.1/32"


# ---------------------------------------------------------------------------------------------- LLM_RUNTIME

RUNTIMES_LISTED = (
    "LLM runtime beside SwarmUI on the VM's GPU (LLM_RUNTIME)\n  1. none: SwarmUI alone on the GPU\n"
    "  2. ollama: Ollama, installed by up; its models listed in ollama-models.yaml\n"
    "  3. llamacpp: llama.cpp's llama-server, installed by up; its GGUF models listed in ollama-models.yaml\n"
)


def test_the_llm_runtime_is_asked_last_none_by_default_and_a_starter_models_file_written(tmp_path, clouds):
    project = tmp_path / "p"
    script = Script("good", "1", "1", "", "", "1", "new", "vllm", "ollama")
    checked, shown = ask(project, clouds, script)
    assert RUNTIMES_LISTED in shown and shown.rstrip().endswith("vllm: not in the list; a number from 1 to 3, or a "
                                                                "name from it")  # fmt: skip
    assert script.prompts[-2:] == ["number or name [cyan]\\[none][/]: "] * 2
    assert checked.answers.llm_runtime == "ollama"
    written = setup_wizard.write(checked)
    assert written[-1] == project / "ollama-models.yaml"
    assert (project / "ollama-models.yaml").read_text() == setup_wizard.MODELS_STARTER
    settings = load(project)
    assert (settings.llm_runtime, settings.llm_models) == ("ollama", [])
    # a re-run offers the project's runtime; a number picks from the list, the models file stays as it is
    (project / "ollama-models.yaml").write_text("ollama:\n  - qwen3:4b\n")
    script = Script(*[""] * 7, "3")
    checked, _ = ask(project, None, script)
    assert script.prompts[-1] == "number or name [cyan]\\[ollama][/]: "
    assert setup_wizard.write(checked)[-1] == project / ".env"
    assert (project / "ollama-models.yaml").read_text() == "ollama:\n  - qwen3:4b\n"
    assert load(project).llm_runtime == "llamacpp"


def test_llm_runtime_given_is_the_default(tmp_path, clouds):
    script = Script("good", "1", "1", "", "", "1", "new", "")
    checked, _ = ask(tmp_path / "p", clouds, script, llm_runtime="llamacpp")
    assert script.prompts[-1] == "number or name [cyan]\\[llamacpp][/]: "
    assert checked.answers.llm_runtime == "llamacpp"


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), EOFError()])
def test_ctrl_c_or_d_at_the_llm_runtime_writes_nothing(tmp_path, clouds, monkeypatch, capsys, at_a_terminal, stop):
    project = tmp_path / "p"
    answers = ("good", "1", "1", "", "", "1", "new", stop)
    assert setup_at_a_terminal(monkeypatch, project, *answers, clouds=clouds) == 130
    shown = capsys.readouterr()
    assert "LLM runtime beside SwarmUI" in shown.out and "canceled: nothing written" in shown.err
    assert not project.exists() and at_a_terminal == []


# ---------------------------------------------------------------------------------------------- the command, typed


def test_the_command_reads_the_password_hidden_and_never_shows_it(tmp_path, clouds, monkeypatch, capsys, at_a_terminal):
    project = tmp_path / "p"
    hidden = []
    monkeypatch.setattr("getpass.getpass", lambda prompt="", stream=None: hidden.append(prompt) or PASSWORD)
    answers = ("os-values", URL, "u", "proj", "", "", "", *REST)  # the password from getpass
    assert setup_at_a_terminal(monkeypatch, project, *answers, clouds=clouds) == 0
    shown = capsys.readouterr()
    assert hidden == [""]  # Rich printed the prompt, getpass read without echo
    assert PASSWORD not in shown.out + shown.err
    assert "checked: OS_AUTH_URL (http://127.0.0.1:9/v3), project proj, pool ru-7a" in shown.out
    assert f"OS_PASSWORD={PASSWORD}\n" in (project / ".env").read_text()
    assert stat.S_IMODE((project / ".env").stat().st_mode) == 0o600


# ---------------------------------------------------------------------------------------------- restricted credentials

RESTRICTED = (
    "error: the application credential cred-1 is restricted: gpu-rent up makes a credential for the VM's "
    "idle-killer, which Keystone allows only to one made with `openstack application credential create "
    "--unrestricted`; make one so, or log in with a password"
)


def credential_logins(tokens: dict[str, SimpleNamespace]):
    """A Keystone that accepts every login, its token the one named by the secret (a password's by default), and
    that refuses to show a credential to its user; the connections closed, by credential id."""
    closed = []

    def refuse(**_):
        raise ForbiddenException("HTTP 403: You are not authorized to perform the requested action")

    def login(auth):
        options = dict(auth.options)
        conn = cloud(access=tokens.get(options.get("application_credential_secret")))
        conn.close = lambda: closed.append(options.get("application_credential_id"))
        conn.identity = SimpleNamespace(get_application_credential=refuse)
        return conn

    return login, closed


def test_a_restricted_credential_is_refused_naming_the_fix_and_the_list_comes_again(tmp_path, clouds):
    login, closed = credential_logins({SECRET: token("cred-1", restricted=True)})
    # refused; the list again, and a password login instead
    script = Script("app-credential", URL, "cred-1", SECRET, "", *typed_answers(), *REST)
    checked, shown, _ = ask_typed(tmp_path / "p", script, login, clouds)
    assert RESTRICTED in " ".join(shown.split())
    assert closed[0] == "cred-1"  # the refused login's connection is closed at once
    assert checked.answers.login.kind == "password" and SECRET not in shown


def test_a_credential_keystone_will_not_show_is_a_warning_and_setup_goes_on(tmp_path, clouds):
    login, _ = credential_logins({SECRET: token("cred-1", restricted=None)})
    script = Script("app-credential", URL, "cred-1", SECRET, "", *REST)
    checked, shown, _ = ask_typed(tmp_path / "p", script, login, clouds)
    assert (
        "warning: could not check that the application credential cred-1 is unrestricted (HTTP 403: You are not "
        "authorized to perform the requested action): gpu-rent up makes a credential"
    ) in " ".join(shown.split())
    assert checked.answers.login.credential_id == "cred-1" and checked.answers.pool == "ru-7a"
