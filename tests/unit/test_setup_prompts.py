"""The interactive gpu-rent setup without a cloud: scripted answers, a stand-in cloud listing, an injected login."""

import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from gpu_rent import cli, setup_prompts, setup_wizard
from gpu_rent.config import ConfigError
from gpu_rent.rental import CloudUnreachable
from gpu_rent.setup_prompts import Choice, Prompter, pick
from gpu_rent.setup_wizard import Answers

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


def cloud(zones=("ru-7a", "ru-7b"), flavors=FLAVORS, images=IMAGES) -> SimpleNamespace:
    """The few calls setup makes, answered from lists: the shape openstacksdk's objects have."""
    return SimpleNamespace(
        compute=SimpleNamespace(
            availability_zones=lambda: [SimpleNamespace(name=z) for z in zones],
            flavors=lambda details=True: [SimpleNamespace(**f) for f in flavors],
        ),
        image=SimpleNamespace(images=lambda: [SimpleNamespace(**i) for i in images]),
        close=lambda: None,
    )


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
    checked, shown = ask(project, clouds, Script("good", "ru-7a", "gpu.l4.1", "1", "new"))
    a = checked.answers
    assert (a.cloud, a.pool, a.flavor, a.image) == ("good", "ru-7a", "gpu.l4.1", "Debian 12 GPU optimized")
    assert a.key == project / "id_ed25519" and a.new_key and checked.key_to_make == project / "id_ed25519"
    assert checked.flavor.gpu_count == 1 and checked.flavor.gpu_model == "L4"
    assert 'logged in: cloud "good" (http://127.0.0.1:9/v3), project p' in shown
    assert not project.exists()  # asking writes nothing
    assert "s3cret" not in shown


def test_non_gpu_flavors_are_never_offered_nor_taken(tmp_path, clouds):
    checked, shown = ask(tmp_path / "p", clouds, Script("good", "1", "m1.small", "f-small", "2", "1", "new"))
    flavors = shown.split("GPU flavor")[1].split("Image")[0]
    assert "m1.small" not in flavors.split("error")[0]
    assert "1. gpu.l4.1 (1× L4, 4 vCPU, 16 GB)" in flavors and "2. gpu.a100.1 (1× A100, 8 vCPU, 64 GB)" in flavors
    assert flavors.count("not in the list") == 2  # by name and by id: both refused
    assert checked.answers.flavor == "gpu.a100.1"


def test_gpu_images_come_first(tmp_path, clouds):
    _, shown = ask(tmp_path / "p", clouds, Script("good", "1", "1", "2", "new"))
    images = shown.split("Image (GPU images first)")[1]
    assert images.index("1. Debian 12 GPU optimized") < images.index("2. Debian 12\n")


def test_a_refused_login_is_one_line_and_the_cloud_is_picked_again(tmp_path, clouds):
    login, tried = logins()
    checked, shown = ask(tmp_path / "p", clouds, Script("wrong", "", "good", "1", "1", "1", "new"), login)
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


def test_no_clouds_yaml_entry_is_one_line(tmp_path, clouds):
    clouds.write_text("clouds: {}\n")
    with pytest.raises(ConfigError, match=r"no cloud in a clouds.yaml \(looked in .*clouds.yaml\)"):
        ask(tmp_path / "p", clouds, Script())


def test_pools_with_gpu_flavors_are_marked_when_the_flavors_say(tmp_path, clouds):
    zoned = [*FLAVORS, {**FLAVORS[2], "id": "f-l4b", "name": "gpu.l4.2", "extra_specs": {
        "pci_passthrough:alias": "GPU-L4:2", "aggregate_instance_extra_specs:availability_zone": "ru-7b"}}]  # fmt: skip
    login, _ = logins(conn=cloud(flavors=zoned))
    _, shown = ask(tmp_path / "p", clouds, Script("good", "2", "1", "1", "new"), login)
    assert "Pool (availability zone), * has GPU flavors\n  1. ru-7a\n  2. ru-7b *\n" in shown
    _, plain = ask(tmp_path / "q", clouds, Script("good", "2", "1", "1", "new"))
    assert "Pool (availability zone)\n  1. ru-7a\n  2. ru-7b\n" in plain


def test_a_missing_key_is_refused_and_asked_again(tmp_path, clouds):
    script = Script("good", "1", "1", "1", str(tmp_path / "nope"), "")
    checked, shown = ask(tmp_path / "p", clouds, script)
    assert "[cyan]\\[new][/]" in script.prompts[4]  # no ~/.ssh/id_ed25519 here: new is the default
    assert f"{tmp_path / 'nope'}: no such key" in shown
    assert checked.key_to_make == tmp_path / "p" / "id_ed25519"


def test_the_usual_key_is_the_default_when_it_is_there(tmp_path, clouds):
    usual = tmp_path / "home" / ".ssh" / "id_ed25519"
    usual.parent.mkdir(parents=True)
    usual.write_text("key")
    checked, _ = ask(tmp_path / "p", clouds, Script("good", "1", "1", "1", ""))
    assert checked.answers.key == usual and checked.key_to_make is None and not checked.answers.new_key


def written_project(tmp_path: Path, clouds: Path) -> Path:
    project = tmp_path / "p"
    checked, _ = ask(project, clouds, Script("good", "ru-7b", "gpu.a100.1", IMAGE, "new"))
    setup_wizard.write(checked)
    return project


def test_a_rerun_offers_the_project_values_and_enter_keeps_them_byte_for_byte(tmp_path, clouds):
    project = written_project(tmp_path, clouds)
    files = {name: (project / name).read_bytes() for name in (".env", "gpu-rent.vars", "id_ed25519")}
    script = Script("", "", "", "", "")
    checked, _ = ask(project, None, script)  # no clouds.yaml given: .env's OS_CLIENT_CONFIG_FILE
    defaults = [p.split("\\[")[1].split("]")[0] for p in script.prompts]
    assert defaults == ["good", "ru-7b", "gpu.a100.1", IMAGE, str(project / "id_ed25519")]
    assert checked.key_to_make is None
    setup_wizard.write(checked)
    assert {name: (project / name).read_bytes() for name in files} == files


def test_a_rerun_changes_only_what_is_changed(tmp_path, clouds):
    project = written_project(tmp_path, clouds)
    env = (project / ".env").read_bytes()
    checked, _ = ask(project, None, Script("", "", "gpu.l4.1", "", ""))
    setup_wizard.write(checked)
    assert (project / ".env").read_bytes() == env
    assert setup_wizard.existing_vars(project) == {"POOL": "ru-7b", "FLAVOR": "gpu.l4.1", "IMAGE": IMAGE}


def test_the_price_is_shown_beside_the_flavor_it_is_the_price_of(tmp_path, clouds):
    project = written_project(tmp_path, clouds)
    with (project / "gpu-rent.vars").open("a") as f:
        f.write("PRICE_PER_HOUR=1.35\n")
    _, shown = ask(project, None, Script("", "", "gpu.l4.1", "", ""))
    assert "gpu.a100.1 (1× A100, 8 vCPU, 64 GB), 1.35/hour" in shown
    assert "gpu.l4.1 (1× L4, 4 vCPU, 16 GB)\n" in shown
    assert "PRICE_PER_HOUR=1.35 in gpu-rent.vars is gpu.a100.1's: update it" in shown


# ---------------------------------------------------------------------------------------------- the command

runner = CliRunner()


@pytest.fixture
def at_a_terminal(monkeypatch):
    """The command as on a terminal: stdin a tty, the login accepted, doctor (a cloud call) left out."""
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr(setup_wizard, "login", logins()[0])
    doctored = []
    monkeypatch.setattr(cli, "doctor", doctored.append)
    return doctored


def setup_at_a_terminal(monkeypatch, project: Path, *answers, clouds: Path | None = None) -> int:
    """The setup command as the shell calls it (its other options at their defaults); its exit code."""
    monkeypatch.setattr("builtins.input", Script(*answers))
    try:
        cli.setup(project=project, clouds_yaml=clouds)
    except typer.Exit as e:
        return e.exit_code
    return 0


def test_the_command_asks_writes_runs_doctor_and_says_what_next(tmp_path, clouds, monkeypatch, capsys, at_a_terminal):
    project = tmp_path / "p"
    assert setup_at_a_terminal(monkeypatch, project, "good", "1", "1", "1", "new", clouds=clouds) == 0
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
    assert setup_at_a_terminal(monkeypatch, project, "", "2", "gpu.l4.1", "1", KeyboardInterrupt()) == 130
    assert {p: p.read_bytes() for p in project.iterdir()} == files


def test_three_refused_logins_exit_4(tmp_path, clouds, monkeypatch, capsys, at_a_terminal):
    monkeypatch.setattr(setup_wizard, "login", logins(refused=("good", "wrong"))[0])
    assert setup_at_a_terminal(monkeypatch, tmp_path / "p", "good", "wrong", "good", clouds=clouds) == 4
    shown = capsys.readouterr()
    assert shown.err.count("refused the login") == 3
    assert "s3cret" not in shown.out + shown.err and "Traceback" not in shown.err
    assert not (tmp_path / "p").exists()


def test_without_a_terminal_it_names_the_non_interactive_form(tmp_path):
    result = runner.invoke(cli.app, ["setup", "--project", str(tmp_path)])
    assert result.exit_code == 2
    assert "no terminal to ask on: use gpu-rent setup --non-interactive --cloud NAME" in result.output
    assert list(tmp_path.iterdir()) == []
