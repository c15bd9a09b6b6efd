"""`gpu-rent setup --non-interactive` against the ground's real Keystone, Nova and Glance.

setup and doctor only read the cloud and dry-run only plans: nothing here rents or creates anything.
"""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.groundkit import CLOUDS_YAML, IMAGE, POOL

pytestmark = pytest.mark.ground

BIN = Path(sys.executable).parent
FLAVOR = "gpu.l4.1"
SECRET = "not-the-password-0815"


def gpu_rent(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The installed command with none of this shell's OS_* or GPU_RENT_* values: only what is passed counts."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    return subprocess.run(
        [str(BIN / "gpu-rent"), *args], cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=300
    )


def setup(project: Path, *args: str, clouds: Path = CLOUDS_YAML) -> subprocess.CompletedProcess:
    return gpu_rent(project.parent, "setup", "--non-interactive", "--project", str(project), *args,
                    OS_CLIENT_CONFIG_FILE=str(clouds))  # fmt: skip


def full(pool: str = POOL, flavor: str = FLAVOR, image: str = IMAGE) -> list[str]:
    return ["--cloud", "ground", "--pool", pool, "--flavor", flavor, "--image", image, "--new-key"]


def one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


def vars_of(project: Path) -> dict[str, str]:
    lines = (project / "gpu-rent.vars").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.fixture
def project(member_conn, tmp_path) -> Path:
    """A folder setup has not written yet (member_conn: skipped with its reason when the ground is down)."""
    return tmp_path / "project"


def test_setup_writes_a_project_that_doctor_passes_and_dry_run_accepts(project):
    result = setup(project, *full())
    assert result.returncode == 0, result.stderr
    assert f"next: gpu-rent up --project {project}" in result.stdout
    assert vars_of(project) == {"POOL": POOL, "FLAVOR": FLAVOR, "IMAGE": IMAGE}
    env = (project / ".env").read_text()
    assert f"OS_CLOUD=ground\nOS_CLIENT_CONFIG_FILE={CLOUDS_YAML}\nGPU_RENT_SSH_KEY={project / 'id_ed25519'}\n" in env
    for secret in (".env", "id_ed25519"):
        assert stat.S_IMODE((project / secret).stat().st_mode) == 0o600
    doctor = gpu_rent(project, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "FAIL" not in doctor.stdout
    dry = gpu_rent(project, "dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"preemptible, {FLAVOR} in {POOL}" in dry.stdout


def test_a_rerun_changing_only_the_flavor_keeps_the_rest(project):
    assert setup(project, *full()).returncode == 0
    key = (project / "id_ed25519").read_bytes()
    env = (project / ".env").read_text()
    again = gpu_rent(project, "setup", "--non-interactive", "--flavor", "gpu.a10.1")  # no clouds.yaml in the shell
    assert again.returncode == 0, again.stderr
    assert vars_of(project) == {"POOL": POOL, "FLAVOR": "gpu.a10.1", "IMAGE": IMAGE}
    assert (project / ".env").read_text() == env
    assert (project / "id_ed25519").read_bytes() == key


def test_a_refused_password_is_one_line_exit_4_and_writes_nothing(project, tmp_path):
    bad = tmp_path / "clouds.yaml"
    bad.write_text(CLOUDS_YAML.read_text().replace("password:", f"password: {SECRET} #", 1))
    result = setup(project, *full(), clouds=bad)
    assert result.returncode == 4
    line = one_line_error(result)
    assert "refused the login" in line
    assert SECRET not in result.stdout + result.stderr
    assert not project.exists()


def test_a_flavor_without_a_gpu_is_refused_naming_the_gpu_flavors(project):
    line = one_line_error(result := setup(project, *full(flavor="m1.small")))
    assert result.returncode == 2
    assert "--flavor m1.small: not a GPU flavor" in line
    assert "gpu.l4.1 (1× L4-24GB" in line and "gpu.a100.1" in line
    assert not project.exists()


@pytest.mark.parametrize(
    ("option", "args", "choice"),
    [
        ("--pool ru-0z: no such pool here", full(pool="ru-0z"), POOL),
        ("--image no-such-image: no such active image", full(image="no-such-image"), IMAGE),
        ("--flavor gpu.z9.1: no such flavor here", full(flavor="gpu.z9.1"), FLAVOR),
    ],
)
def test_unknown_values_name_the_option_and_the_choices(project, option, args, choice):
    result = setup(project, *args)
    assert result.returncode == 2
    line = one_line_error(result)
    assert option in line and choice in line
    assert not project.exists()


def test_a_missing_value_names_the_choices(project):
    result = setup(project, "--cloud", "ground", "--pool", POOL, "--flavor", FLAVOR, "--new-key")
    assert result.returncode == 2
    assert f"--image is required (here: {IMAGE}" in one_line_error(result)
    assert not project.exists()


def test_a_flavor_given_by_id_is_found(project, member_conn):
    flavor_id = member_conn.compute.find_flavor(FLAVOR).id
    result = setup(project, *full(flavor=flavor_id))
    assert result.returncode == 0, result.stderr
    assert vars_of(project)["FLAVOR"] == FLAVOR
