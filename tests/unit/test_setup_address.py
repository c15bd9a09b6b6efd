"""How gpu-rent setup settles OPERATOR_CIDR: config's verdict on auto, the address given in its place, and the
non-interactive command with a stand-in cloud and a stand-in route (nothing here leaves this machine)."""

import ipaddress
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_rent.cli import setup as cli_setup
from gpu_rent.cli.app import app
from gpu_rent.project import settings as config
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.settings import load
from gpu_rent.setup import address as setup_address
from gpu_rent.setup import login as setup_login
from gpu_rent.setup.address import Refused, as_cidr, of_url, settle
from tests.unit.test_setup_prompts import GROUND_ROUTE, NAT_ROUTE, PUBLIC_ROUTE, cloud

URL = "https://keystone.example.com:5000/v3"
WHERE_TO_LOOK = "your router's public address is shown by e.g. https://ifconfig.me or your router's page"


def via(local: str, cloud_at: str):
    """A route to the cloud from local, the cloud's address cloud_at (what config.route_to returns)."""
    return lambda host: (ipaddress.ip_address(local), ipaddress.ip_address(cloud_at))


def no_route(host):
    raise OSError(101, "Network is unreachable")


PUBLIC, NAT, GROUND = of_url(URL, via(*PUBLIC_ROUTE)), of_url(URL, via(*NAT_ROUTE)), of_url(URL, via(*GROUND_ROUTE))


# ---------------------------------------------------------------------------------------------- the decision


def test_a_public_address_on_the_route_keeps_auto_or_the_projects_value():
    assert PUBLIC.auto == "81.2.69.142/32"
    assert settle(PUBLIC, None, None) is None and settle(PUBLIC, None, "auto") is None
    assert settle(PUBLIC, None, "81.2.69.0/24") is None  # the project's own: the line stays
    assert settle(PUBLIC, "81.2.69.143", None) == "81.2.69.143/32"  # given: written, checked all the same


def test_behind_nat_with_a_cloud_on_the_internet_the_address_is_required():
    assert NAT.auto is None and not NAT.private_cloud
    for existing in (None, "auto", "AUTO"):
        with pytest.raises(ConfigError) as raised:
            settle(NAT, None, existing)
        assert str(raised.value) == (
            "setup: --operator-cidr is required: this machine reaches the cloud from 192.168.1.20, a private address, "
            f"so OPERATOR_CIDR=auto cannot find your address; give your public address ({WHERE_TO_LOOK}) as "
            "--operator-cidr ADDRESS"
        )
    assert settle(NAT, None, "81.2.69.142/32") is None  # a re-run keeps the project's address
    assert setup_address.question(NAT) == (
        "Your public IP address, for SSH to the VM (this machine reaches the cloud from 192.168.1.20, a private "
        f"address; {WHERE_TO_LOOK})"
    )


def test_without_a_route_the_cloud_is_private_only_when_its_url_says_so():
    lost = of_url(URL, no_route)
    assert (lost.auto, lost.local, lost.cloud) == (None, None, None) and not lost.private_cloud
    assert lost.situation() == "this machine has no route to keystone.example.com"
    assert of_url("http://10.0.0.5:5000/v3", no_route).private_cloud


@pytest.mark.parametrize(
    ("value", "cidr"),
    [("81.2.69.142", "81.2.69.142/32"), (" 81.2.69.142/24 ", "81.2.69.0/24"), ("2a00:1450::1", "2a00:1450::1/128"),
     ("2a00:1450::1/64", "2a00:1450::/64"), ("AUTO", None)],
)  # fmt: skip
def test_a_bare_address_becomes_a_host_network(value, cidr):
    if cidr is None:
        assert as_cidr(value, PUBLIC) == "auto"  # auto, where it resolves
    else:
        assert as_cidr(value, PUBLIC) == cidr == as_cidr(value, GROUND)


@pytest.mark.parametrize(
    ("value", "why"),
    [("192.168.1.20", "a private address"), ("10.231.7.1/32", "a private address"), ("fd00::1", "a private address"),
     ("100.64.0.7", "a private address"), ("127.0.0.1", "a loopback address"), ("::1", "a loopback address"),
     ("0.0.0.0", "every address"), ("0.0.0.0/0", "every address"), ("::/0", "every address"),
     ("81.2.69.142/0", "every address"), ("224.0.0.1", "a multicast address"), ("81.2.69.300", "not an IP address"),
     ("my-laptop", "not an IP address"), ("auto", "auto cannot find your address here: this machine reaches")],
)  # fmt: skip
def test_what_cannot_be_the_address_the_vm_sees_is_refused_naming_why(value, why):
    with pytest.raises(Refused, match=f"^{re.escape(why)}"):
        as_cidr(value, NAT)
    with pytest.raises(ConfigError, match=f"^{re.escape(f'setup: --operator-cidr {value}: {why}')}"):
        settle(NAT, value, None)


def test_on_a_private_cloud_a_private_address_is_taken_loopback_and_everyone_still_not():
    assert GROUND.private_cloud and GROUND.auto is None
    assert as_cidr("10.231.7.1", GROUND) == "10.231.7.1/32"
    for value in ("127.0.0.1", "0.0.0.0/0", "auto"):
        with pytest.raises(Refused):
            as_cidr(value, GROUND)
    with pytest.raises(ConfigError, match=r"its VMs see this machine from \(the cloud, at 127\.0\.0\.1"):
        settle(GROUND, None, None)


# ---------------------------------------------------------------------------------------------- the command

runner = CliRunner()


@pytest.fixture
def command(tmp_path, monkeypatch, clouds_yaml):
    """gpu-rent setup --non-interactive on a stand-in cloud (login accepted, doctor left out); set route[:] to pick
    the route; returns (run, route, project)."""
    clouds = clouds_yaml(good="s3cret-good")
    monkeypatch.setattr(setup_login, "login", lambda auth: cloud())
    monkeypatch.setattr(cli_setup, "doctor", lambda project: None)
    way = list(NAT_ROUTE)
    monkeypatch.setattr(config, "route_to", lambda host: tuple(ipaddress.ip_address(a) for a in way))
    project = tmp_path / "p"

    def run(*args: str):
        base = ["setup", "--non-interactive", "--project", str(project), "--clouds-yaml", str(clouds)]
        rest = ["--cloud", "good", "--pool", "ru-7a", "--flavor", "gpu.l4.1", "--image", "Debian 12", "--new-key"]
        return runner.invoke(app, [*base, *rest, *args])

    return run, way, project


def vars_line(project: Path) -> str:
    return next(line for line in (project / "gpu-rent.vars").read_text().splitlines() if "OPERATOR_CIDR=" in line)


def test_behind_nat_without_the_option_it_is_exit_2_naming_it_and_writes_nothing(command):
    run, _, project = command
    result = run()
    assert result.exit_code == 2, result.output
    assert "--operator-cidr is required: this machine reaches the cloud from 192.168.1.20" in result.output
    assert not project.exists()


def test_behind_nat_the_option_is_written_and_config_reads_it(command):
    run, _, project = command
    result = run("--operator-cidr", "81.2.69.142")
    assert result.exit_code == 0, result.output
    assert "SSH from 81.2.69.142/32" in " ".join(result.output.split())
    assert vars_line(project) == "OPERATOR_CIDR=81.2.69.142/32"
    assert load(project).resolved_operator_cidr() == "81.2.69.142/32"
    # a re-run without the option keeps it
    assert run().exit_code == 0 and vars_line(project) == "OPERATOR_CIDR=81.2.69.142/32"


@pytest.mark.parametrize("bad", ["192.168.1.20", "127.0.0.1", "0.0.0.0/0", "nonsense", "auto"])
def test_a_bad_value_is_one_line_exit_2_and_writes_nothing(command, bad):
    run, _, project = command
    result = run("--operator-cidr", bad)
    assert result.exit_code == 2
    assert result.output.startswith(f"error: setup: --operator-cidr {bad}: ")
    assert len(result.output.strip().splitlines()) == 1
    assert not project.exists()


def test_where_auto_resolves_the_commented_line_stays(command):
    run, route, project = command
    route[:] = PUBLIC_ROUTE
    assert run().exit_code == 0
    assert vars_line(project) == "# OPERATOR_CIDR=auto"


def test_on_a_private_cloud_the_ground_address_is_taken(command):
    run, route, project = command
    route[:] = GROUND_ROUTE
    assert "the cloud, at 127.0.0.1, is on a private network" in " ".join(run().output.split())
    assert run("--operator-cidr", "10.231.7.1/32").exit_code == 0
    assert vars_line(project) == "OPERATOR_CIDR=10.231.7.1/32"
