"""gpu-rent setup without a cloud: option errors, the files it writes, and what a re-run keeps."""

import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_rent import setup_wizard
from gpu_rent.atomic import write_atomically
from gpu_rent.cli import app
from gpu_rent.config import ConfigError
from gpu_rent.setup_wizard import Answers

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
    write_atomically(path, "A=1\n", 0o600)  # gpu_rent/atomic.py, which setup writes .env with
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
