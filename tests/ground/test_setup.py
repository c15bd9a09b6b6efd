"""`gpu-rent setup --non-interactive` against the ground's real Keystone, Nova and Glance.

setup and doctor only read the cloud and dry-run only plans: nothing here rents anything; the one thing created is an
application credential of the member user (restricted or unrestricted), deleted after its test.

The ground's Keystone is on 127.0.0.1, which this machine reaches from 127.0.0.1: OPERATOR_CIDR=auto cannot resolve to
a public address, so setup needs --operator-cidr. The cloud is on a private network too, so the address its VMs see
this machine from is taken although private: the ground bridge's 10.231.7.1, as ground/up.sh writes it.
"""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_rent.project import settings as config
from tests.groundkit import CLOUDS_YAML, IMAGE, POOL, unique

pytestmark = pytest.mark.ground

BIN = Path(sys.executable).parent
FLAVOR = "gpu.l4.1"
SECRET = "not-the-password-0815"
OPERATOR = "10.231.7.1/32"  # the ground bridge (ground/lib.sh EXT_GW): where the hosts see this machine from


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
    return ["--cloud", "ground", "--pool", pool, "--flavor", flavor, "--image", image, "--new-key",
            "--operator-cidr", OPERATOR]  # fmt: skip


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
    assert vars_of(project) == {"POOL": POOL, "FLAVOR": FLAVOR, "IMAGE": IMAGE, "OPERATOR_CIDR": OPERATOR}
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
    # the project's OPERATOR_CIDR is kept without --operator-cidr
    assert vars_of(project) == {"POOL": POOL, "FLAVOR": "gpu.a10.1", "IMAGE": IMAGE, "OPERATOR_CIDR": OPERATOR}
    assert (project / ".env").read_text() == env
    assert (project / "id_ed25519").read_bytes() == key


def refused_writing_nothing(result, project: Path) -> None:
    """A refused login: exit 4, one line that says so, the password nowhere, no project folder made."""
    assert result.returncode == 4
    assert "refused the login" in one_line_error(result)
    assert SECRET not in result.stdout + result.stderr
    assert not project.exists()


def test_a_refused_password_is_one_line_exit_4_and_writes_nothing(project, tmp_path):
    bad = tmp_path / "clouds.yaml"
    bad.write_text(CLOUDS_YAML.read_text().replace("password:", f"password: {SECRET} #", 1))
    refused_writing_nothing(setup(project, *full(), clouds=bad), project)


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


def test_without_operator_cidr_it_is_exit_2_naming_it_and_writes_nothing(project):
    result = setup(project, *full()[:-2])
    assert result.returncode == 2
    line = one_line_error(result)
    assert "--operator-cidr is required: this machine reaches the cloud from 127.0.0.1, a loopback address" in line
    assert "the cloud, at 127.0.0.1, is on a private network" in line
    assert not project.exists()


@pytest.mark.parametrize("bad", ["127.0.0.1", "0.0.0.0/0", "auto"])
def test_an_operator_cidr_the_vms_cannot_see_is_refused(project, bad):
    result = setup(project, *full()[:-2], "--operator-cidr", bad)
    assert result.returncode == 2
    assert one_line_error(result).startswith(f"error: setup: --operator-cidr {bad}: ")
    assert not project.exists()


def test_the_operator_cidr_given_is_what_up_opens_ssh_to_and_doctor_and_dry_run_pass(project):
    result = setup(project, *full()[:-2], "--operator-cidr", "10.231.7.1")  # a bare address: /32
    assert result.returncode == 0, result.stderr
    assert f"SSH from {OPERATOR}" in result.stdout
    text = (project / "gpu-rent.vars").read_text()
    assert f"\nOPERATOR_CIDR={OPERATOR}\n" in text and "# OPERATOR_CIDR=auto" not in text
    assert config.load(project).resolved_operator_cidr() == OPERATOR  # what up gives the security group
    doctor = gpu_rent(project, "doctor")
    assert doctor.returncode == 0 and "FAIL" not in doctor.stdout, doctor.stdout + doctor.stderr
    dry = gpu_rent(project, "dry-run")
    assert dry.returncode == 0, dry.stderr


def test_a_flavor_given_by_id_is_found(project, member_conn):
    flavor_id = member_conn.compute.find_flavor(FLAVOR).id
    result = setup(project, *full(flavor=flavor_id))
    assert result.returncode == 0, result.stderr
    assert vars_of(project)["FLAVOR"] == FLAVOR


# ---------------------------------------------------------------------------------------------- typed OS_* values


def ground_auth() -> dict[str, str]:
    """The member's login from the ground's clouds.yaml, as a user would copy it from an openrc."""
    entry = yaml.safe_load(CLOUDS_YAML.read_text())["clouds"]["ground"]
    return {**entry["auth"], "region_name": entry.get("region_name", "")}


def typed(auth: dict[str, str]) -> list[str]:
    return ["--auth-url", auth["auth_url"], "--username", auth["username"], "--project-name", auth["project_name"],
            "--user-domain", auth["user_domain_name"], "--project-domain", auth["project_domain_name"],
            "--region", auth["region_name"]]  # fmt: skip


def setup_typed(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """setup with typed values, the secret in the environment, no clouds.yaml named."""
    args = ["setup", "--non-interactive", "--project", str(project), *args, "--pool", POOL, "--flavor", FLAVOR]
    return gpu_rent(project.parent, *args, "--image", IMAGE, "--new-key", "--operator-cidr", OPERATOR, **env)


def env_keys(project: Path) -> list[str]:
    return [line.split("=", 1)[0] for line in (project / ".env").read_text().splitlines() if "=" in line]


def test_typed_os_values_write_a_project_that_doctor_passes(project):
    auth = ground_auth()
    result = setup_typed(project, *typed(auth), "--price-per-hour", "0.85", OS_PASSWORD=auth["password"])
    assert result.returncode == 0, result.stderr
    assert auth["password"] not in result.stdout + result.stderr
    assert f"checked: OS_AUTH_URL ({auth['auth_url']}), project {auth['project_name']}" in result.stdout
    assert env_keys(project) == [
        "OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_USER_DOMAIN_NAME",
        "OS_PROJECT_DOMAIN_NAME", "OS_REGION_NAME", "GPU_RENT_SSH_KEY",
    ]  # fmt: skip
    assert stat.S_IMODE((project / ".env").stat().st_mode) == 0o600
    assert vars_of(project) == {
        "POOL": POOL, "FLAVOR": FLAVOR, "IMAGE": IMAGE, "OPERATOR_CIDR": OPERATOR, "PRICE_PER_HOUR": "0.85",
    }  # fmt: skip
    doctor = gpu_rent(project, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "FAIL" not in doctor.stdout


def test_typed_values_with_a_wrong_password_are_exit_4_and_write_nothing(project):
    refused_writing_nothing(setup_typed(project, *typed(ground_auth()), OS_PASSWORD=SECRET), project)


def test_typed_values_without_the_password_name_its_variable(project):
    result = setup_typed(project, *typed(ground_auth()))
    assert result.returncode == 2
    assert "OS_PASSWORD is required in the environment" in one_line_error(result)
    assert not project.exists()


@pytest.fixture
def app_credential(member_conn):
    """Makes an application credential of the member user on the ground's Keystone: (id, secret); each deleted
    after the test."""
    user, made = member_conn.current_user_id, []

    def make(unrestricted: bool) -> tuple[str, str]:
        name = unique("t-setup")
        made.append(member_conn.identity.create_application_credential(user=user, name=name, unrestricted=unrestricted))
        return made[-1].id, made[-1].secret

    yield make
    for credential in made:
        member_conn.identity.delete_application_credential(user, credential.id)


def test_an_application_credential_writes_a_project_that_doctor_passes(project, app_credential):
    credential, secret = app_credential(unrestricted=True)  # up makes the idle-killer's credential with it
    auth = ground_auth()
    args = ["--auth-url", auth["auth_url"], "--application-credential-id", credential, "--flavor-fallback", "gpu.a10.1"]
    result = setup_typed(project, *args, OS_APPLICATION_CREDENTIAL_SECRET=secret)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    # no --region: the catalog's only one is written
    assert env_keys(project) == [
        "OS_AUTH_URL", "OS_AUTH_TYPE", "OS_APPLICATION_CREDENTIAL_ID", "OS_APPLICATION_CREDENTIAL_SECRET",
        "OS_REGION_NAME", "GPU_RENT_SSH_KEY",
    ]  # fmt: skip
    assert "OS_AUTH_TYPE=v3applicationcredential\n" in (project / ".env").read_text()
    assert vars_of(project)["FLAVOR_FALLBACK"] == "gpu.a10.1"
    doctor = gpu_rent(project, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "FAIL" not in doctor.stdout
    # and back to the clouds.yaml entry: no line of the credential stays
    again = setup(project, "--cloud", "ground")
    assert again.returncode == 0, again.stderr
    assert sorted(env_keys(project)) == ["GPU_RENT_SSH_KEY", "OS_CLIENT_CONFIG_FILE", "OS_CLOUD"]


def test_a_restricted_application_credential_is_refused_naming_the_fix_and_writes_nothing(project, app_credential):
    credential, secret = app_credential(unrestricted=False)
    args = ["--auth-url", ground_auth()["auth_url"], "--application-credential-id", credential]
    result = setup_typed(project, *args, OS_APPLICATION_CREDENTIAL_SECRET=secret)
    assert result.returncode == 2
    assert one_line_error(result) == (
        f"error: setup: the application credential {credential} is restricted: gpu-rent up makes a credential for "
        "the VM's idle-killer, which Keystone allows only to one made with `openstack application credential create "
        "--unrestricted`; make one so, or log in with a password"
    )
    assert secret not in result.stdout + result.stderr
    assert not project.exists()


def test_set_writes_other_keys_in_place_and_a_rerun_can_put_one_back(project):
    result = setup(project, *full(), "--set", "DATA_VOLUME_GB=7", "--set", "VOLUME_TYPE=fast.{pool}")
    assert result.returncode == 0, result.stderr
    assert vars_of(project) == {"POOL": POOL, "FLAVOR": FLAVOR, "IMAGE": IMAGE, "VOLUME_TYPE": "fast.{pool}",
                                "DATA_VOLUME_GB": "7", "OPERATOR_CIDR": OPERATOR}  # fmt: skip
    settings = config.load(project, with_cloud=False)
    assert settings.data_volume_gb == 7 and settings.volume_type == "fast.{pool}"
    again = gpu_rent(project, "setup", "--non-interactive", "--set", "DATA_VOLUME_GB=")
    assert again.returncode == 0, again.stderr
    assert "DATA_VOLUME_GB" not in vars_of(project)
    assert "# DATA_VOLUME_GB=" in (project / "gpu-rent.vars").read_text()
