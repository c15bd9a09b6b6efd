"""The CLI's contract with its user: help that reads well, one-line errors, exit codes."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_rent.cli import common
from gpu_rent.cli.app import app
from gpu_rent.project.state import StateStore

runner = CliRunner()
COMMANDS = [
    "up", "stop", "destroy", "status", "doctor", "dry-run", "resize-data", "seed-extensions", "seed-models", "seed-llm",
    "seed-autocomplete", "hold", "tunnel", "watchdog", "open", "ssh", "logs",
]  # fmt: skip


@pytest.fixture
def project(dead_cloud_project: Path) -> Path:
    return dead_cloud_project


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "--project" in result.output


def test_top_level_help_lists_commands_and_exit_codes():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output
    assert "130" in result.output and "Exit codes" in result.output


@pytest.mark.parametrize(
    ("vars_text", "expected"),
    [
        ("POOL=ru-7a\nFLAVOUR=x\nIMAGE=i\n", "gpu-rent.vars:2: unknown key FLAVOUR"),
        ("POOL=ru-7a\nIMAGE=i\n", "FLAVOR is required"),
        ("POOL=ru-7a\nFLAVOR=f\nIMAGE=i\nBOOT_VOLUME_GB=lots\n", "gpu-rent.vars:4: BOOT_VOLUME_GB"),
        ("POOL=ru-7a\nFLAVOR=f\nIMAGE=i\nLOCAL_PORT=70000\n", "LOCAL_PORT"),
        ("POOL=ru-7a\nFLAVOR=f\nIMAGE=i\nKEEP_FLOATING_IP=maybe\n", "KEEP_FLOATING_IP"),
        ("POOL=ru-7a\nFLAVOR=f\nIMAGE=i\nOPERATOR_CIDR=home\n", "OPERATOR_CIDR"),
        ("POOL=ru-7a\nFLAVOR=f\nFLAVOR=g\nIMAGE=i\n", "FLAVOR"),
        ("POOL=ru-7a\nFLAVOR f\nIMAGE=i\n", "gpu-rent.vars:2"),
    ],
)
@pytest.mark.parametrize("command", ["up", "status", "stop"])
def test_bad_config_is_one_line_and_exit_2(project, vars_text, expected, command):
    (project / "gpu-rent.vars").write_text(vars_text)
    result = runner.invoke(
        app, [command, "--project", str(project), "--yes"] if command == "up" else [command, "-p", str(project)]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], result.output
    assert not (project / ".gpu-rent" / "state.json").exists()


def test_missing_ssh_key_refuses_up_before_anything(project):
    (project / "key.pub").unlink()
    (project / "key").unlink()
    result = runner.invoke(app, ["up", "-p", str(project), "--yes"])
    assert result.exit_code == 2
    assert "GPU_RENT_SSH_KEY" in result.output and "not found" in result.output


def test_destroy_without_the_flag_refuses_and_touches_nothing(project):
    result = runner.invoke(app, ["destroy", "-p", str(project)])
    assert result.exit_code == 2
    assert "--i-understand-data-loss" in result.output
    assert not (project / ".gpu-rent").exists()


def test_unreachable_cloud_is_exit_4_with_one_line(project):
    result = runner.invoke(app, ["status", "-p", str(project)])
    assert result.exit_code == 4, result.output
    assert "cannot reach the cloud" in result.output
    assert "s3cret-password" not in result.output


@pytest.mark.parametrize("command", [["stop"], ["destroy", "--i-understand-data-loss"], ["status"], ["dry-run"]])
def test_an_unreachable_cloud_is_the_only_line(project, command):
    # neither keystoneauth's own warning nor a note about outputs that a never-rented VM cannot have
    result = runner.invoke(app, [*command, "-p", str(project)])
    assert result.exit_code == 4, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the cloud"), result.output


@pytest.mark.parametrize("command", [["doctor"], ["dry-run"], ["status"]])
def test_a_password_in_the_auth_url_never_reaches_the_output(project, command):
    # openstacksdk's own errors quote the URL as given: both what gpu-rent says and what it quotes are masked
    (project / ".env").write_text(
        "OS_AUTH_URL=http://user:URLSECRET@127.0.0.1:9/v3\nOS_USERNAME=u\nOS_PASSWORD=pw\nOS_PROJECT_NAME=p\n"
        f"OS_USER_DOMAIN_NAME=Default\nOS_PROJECT_DOMAIN_NAME=Default\nGPU_RENT_SSH_KEY={project / 'key'}\n"
    )
    result = runner.invoke(app, [*command, "-p", str(project)])
    assert result.exit_code == 4, result.output
    assert "http://***@127.0.0.1:9/v3" in result.output
    assert "URLSECRET" not in result.output


def test_the_cli_s_modules_load_no_sdk_until_a_command_uses_it():
    """openstacksdk's import alone is a third of a second (keystoneauth and requests with it): what the CLI imports
    to start must not load them, or status pays it even when it reads the cloud without them."""
    code = (
        "import sys, gpu_rent.cli.app, gpu_rent.rental.report, gpu_rent.rental.operations; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'openstack', 'keystoneauth1', 'requests'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["resize-data", "--gb", "0"], "error: Invalid value for '--gb': "),
        (["up", "--pool", "x"], "error: No such option: --pool (see gpu-rent up --help)"),
        (["resize-data"], "error: Missing option '--gb' (see gpu-rent resize-data --help)"),
        (["rent"], "error: No such command 'rent' (see gpu-rent --help)"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(project, args, line):
    gpu_rent = Path(sys.executable).parent / "gpu-rent"  # the installed command, as users run it
    result = subprocess.run([str(gpu_rent), *args], cwd=project, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(line), result.stderr


def test_no_arguments_still_show_the_help():
    result = subprocess.run([sys.executable, "-m", "gpu_rent"], capture_output=True, text=True, timeout=60)
    assert "resize-data" in result.stdout and result.stderr == ""


def test_a_second_mutating_command_waits_then_refuses(project):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""\
            import time
            from gpu_rent.project.state import StateStore
            with StateStore({str(project)!r}).lock("up"):
                print("held", flush=True)
                time.sleep(30)
            """)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        result = runner.invoke(app, ["stop", "-p", str(project)])
        assert result.exit_code == 3, result.output
        assert "'up'" in result.output and str(holder.pid) in result.output
    finally:
        holder.kill()
        holder.wait()
    assert StateStore(project).load().phase == "idle"


@pytest.mark.parametrize("gb", ["0", "-5", "lots"])
def test_resize_data_refuses_a_size_that_is_no_size(project, gb):
    result = runner.invoke(app, ["resize-data", "--gb", gb, "--project", str(project)])
    assert result.exit_code == 2
    assert "--gb" in result.output


def test_a_bad_seed_list_is_one_line_and_exit_2_before_anything(project):
    (project / "seed.yml").write_text("models:\n  - {url: 'https://example.org/a.bin', folder: Lora}\n")
    result = runner.invoke(app, ["up", "--yes", "--project", str(project)])
    assert result.exit_code == 2
    assert "seed.yml: models[1]: sha256 must be 64 hex digits" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--until", "2001-01-01T00:00"], "that is in the past"),
        (["--minutes", "0"], "a hold lasts at least 1 minute"),
        (["--minutes", "5", "--clear"], "--minutes and --clear do not go together"),
    ],
)
def test_hold_mistakes_are_one_line_and_exit_2_before_the_cloud(project, args, message):
    result = runner.invoke(app, ["hold", *args, "--project", str(project)])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize("command", [["tunnel"], ["tunnel", "--background"], ["open"], ["ssh"], ["logs"], ["watchdog"]])
def test_commands_that_need_the_vm_say_so_in_one_line_before_up(project, command):
    result = runner.invoke(app, [*command, "--project", str(project)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == ["error: no VM address in the state: run gpu-rent up first"]
    assert not (project / ".gpu-rent" / "tunnel.json").exists()


def test_logs_refuses_an_unknown_unit(project):
    result = runner.invoke(app, ["logs", "--unit", "bogus", "--project", str(project)])
    assert result.exit_code == 2
    assert "--unit bogus: not one of swarmui, killer, all" in result.output


def test_closing_a_tunnel_when_none_runs_says_so(project):
    result = runner.invoke(app, ["tunnel", "--close", "--project", str(project)])
    assert result.exit_code == 0 and "no tunnel runs" in result.output


def _ended_process() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_sentinel_leaves_the_vm_alone_after_a_clean_close(project):
    from gpu_rent.project import settings as config
    from gpu_rent.watch import watchdog

    settings = config.load(project)
    pid = _ended_process()
    (project / ".gpu-rent").mkdir()
    (project / ".gpu-rent" / "tunnel.json").write_text(f'{{"pid": {pid}, "state": "closed", "message": "Ctrl+C"}}')
    said = []
    assert watchdog.sentinel(settings, pid, said.append, tick=0.05) == 0
    assert said == [f"the tunnel process {pid} ended cleanly (Ctrl+C); the VM keeps running"]


def test_the_sentinel_stops_the_vm_after_an_unclean_end_and_says_when_it_cannot(project):
    from gpu_rent.project import settings as config
    from gpu_rent.watch import watchdog

    settings = config.load(project)
    pid = _ended_process()
    (project / ".gpu-rent").mkdir()
    (project / ".gpu-rent" / "tunnel.json").write_text(f'{{"pid": {pid}, "state": "forwarding"}}')
    said = []
    assert watchdog.sentinel(settings, pid, said.append, tick=0.05) == 1  # the test cloud never answers
    assert said[0] == f"the tunnel process {pid} ended uncleanly (its record says 'forwarding'): stopping the VM"
    assert said[-1].startswith("could not stop the VM: cannot reach the cloud") and "gpu-rent stop" in said[-1]


@pytest.mark.parametrize(("flags", "extra"), [([], None), (["--full"], {"vm_stamp_redo": True})])
def test_up_full_asks_every_vm_role_to_redo_its_work(project, monkeypatch, flags, extra):
    """The one way past the roles' stamps for a user who mends what the stamps do not watch."""
    from gpu_rent.cli import rental as cli_rental
    from gpu_rent.rental.operations import OperationFailed

    asked = []

    class Rental:
        def up(self, confirm, extra=None):
            asked.append(extra)
            raise OperationFailed("stopped here", canceled=True)

    monkeypatch.setattr(cli_rental, "rental_for", lambda settings: Rental())
    result = runner.invoke(app, ["up", "-p", str(project), "--yes", "--no-tunnel", *flags])
    assert result.exit_code != 0
    assert asked == [extra]


def test_a_deleted_current_folder_is_one_line_and_help_still_works(tmp_path):
    gone = tmp_path / "gone"
    code = (
        "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); sys.argv = ['gpu-rent', *sys.argv[2:]]; "
        "from gpu_rent.cli.app import main; main()"
    )
    for args, rc in ((["status"], 2), (["status", "-p", str(tmp_path)], 2), (["up", "--help"], 0)):
        gone.mkdir()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this checkout's gpu_rent
        done = subprocess.run([sys.executable, "-c", code, str(gone), *args], capture_output=True, text=True, env=env)
        assert done.returncode == rc, done.stderr
        if rc:
            assert done.stderr.strip().splitlines() == [
                "error: the current folder no longer exists (deleted or moved): cd into one that does"
            ]


def test_tunnel_close_with_background_is_refused_not_half_done(project):
    result = runner.invoke(app, ["tunnel", "--close", "--background", "-p", str(project)])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --close and --background do not go together: give one of them"


class Told:
    def __init__(self):
        self.said: list[tuple[str, str]] = []

    def notify(self, title: str, message: str) -> str:
        self.said.append((title, message))
        return "none"


@pytest.mark.parametrize(
    ("seconds", "told"), [(0.0, []), (31.0, [("gpu-rent destroy failed", "the terminal says why")])]
)
def test_a_long_command_ends_with_a_notification_a_short_one_does_not(project, monkeypatch, seconds, told):
    notes = Told()
    monkeypatch.setattr(common, "notifier", notes)
    clock = iter([1000.0, 1000.0 + seconds, 1000.0 + seconds])
    monkeypatch.setattr(common, "_clock", lambda: next(clock))
    result = runner.invoke(app, ["destroy", "-p", str(project)])  # refused: exit 2, as a failure that took long
    assert result.exit_code == 2
    assert notes.said == told


def test_the_notification_says_done_and_never_comes_after_a_cancel(monkeypatch):
    import typer

    notes = Told()
    monkeypatch.setattr(common, "notifier", notes)
    clock = iter([0.0, 40.0, 0.0, 40.0])
    monkeypatch.setattr(common, "_clock", lambda: next(clock))

    @common.tells_when_long("push")
    def done(project=Path("/tmp/my-project")) -> None:
        pass

    @common.tells_when_long("push")
    def canceled() -> None:
        raise typer.Exit(130)

    done(project=Path("/tmp/my-project"))
    with pytest.raises(typer.Exit):
        canceled()
    assert notes.said == [("gpu-rent push done", "project my-project")]


def test_the_entry_point_of_a_venv_made_before_the_cli_became_a_package_still_runs(tmp_path):
    """Such a venv's gpu-rent script does `from gpu_rent.cli import main`: after a git pull it must still stop a VM."""
    code = "import sys; sys.argv = ['gpu-rent', '--version']; from gpu_rent.cli import main; main()"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("gpu-rent "), done.stderr
