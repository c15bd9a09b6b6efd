"""The state records where its resources are (project and region), and a login that lands elsewhere is refused in
one line before a command can take them for gone (issue 38, item 6; money review §8): status said nothing was
billing, called the data volume deleted outside gpu-rent and dropped its id when an openrc of another project or
region was sourced."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from keystoneauth1.exceptions import EndpointNotFound
from typer.testing import CliRunner

from gpu_rent.cli.app import app
from gpu_rent.cloud import connect as connect_module
from gpu_rent.cloud import view as cloud
from gpu_rent.cloud.connect import ScopeElsewhere, refuse_elsewhere, scope_of
from gpu_rent.project import settings as config
from gpu_rent.project.env import CloudAuth
from gpu_rent.project.state import Phase, Scope, State, StateStore
from gpu_rent.rental import operations as rental_module
from gpu_rent.rental import up_head_start
from gpu_rent.rental.operations import Rental
from gpu_rent.rental.report import state_cloud_check
from tests.unit.test_cloud_http import HERE, a_cloud, keep_route, route_to, standin, status  # noqa: F401

runner = CliRunner()
THERE = Scope("p-1", "RegionTwo")
RESOURCES = {"server": "gone-1", "data_volume": "d-old", "floating_ip_address": "10.231.7.99"}


def rented(project: Path, where: Scope | None, resources: dict | None = None) -> bytes:
    """The project's state: a rental recorded in `where`; the file's bytes, to show nothing was rewritten."""
    store = StateStore(project)
    store.save(State(phase=Phase.READY_CLOUD, resources=dict(RESOURCES if resources is None else resources),
                     cloud=where))  # fmt: skip
    return store.path.read_bytes()


# ---------------------------------------------------------------------------------------------- the refusal


def test_a_login_where_the_resources_are_or_nothing_to_lose_passes():
    auth = CloudAuth(cloud="test")
    refuse_elsewhere(None, HERE, auth)
    refuse_elsewhere(State(resources=dict(RESOURCES)), HERE, auth)  # nothing recorded yet: nothing to compare
    refuse_elsewhere(State(cloud=THERE), HERE, auth)  # recorded, but no resource left to forget (destroyed)
    refuse_elsewhere(State(resources=dict(RESOURCES), cloud=HERE), HERE, auth)


def test_another_region_is_refused_naming_both_and_the_value_that_sent_it_there():
    auth = CloudAuth(options=(("auth_url", "http://k/v3"), ("region_name", "RegionOne")), read_from=".env")
    with pytest.raises(ScopeElsewhere) as refused:
        refuse_elsewhere(State(resources=dict(RESOURCES), cloud=THERE), HERE, auth)
    assert str(refused.value) == (
        ".env: OS_REGION_NAME=RegionOne logs in to project p-1, region RegionOne, but this folder's server, "
        "data volume are in project p-1, region RegionTwo (.gpu-rent/state.json): refused, nothing forgotten; "
        "log in to region RegionTwo again, or end them from there first"
    )
    assert refused.value.key is None and "\n" not in str(refused.value)


def test_another_project_names_where_the_project_came_from():
    shell = CloudAuth(options=(("auth_url", "http://k/v3"), ("project_id", "p-2")), read_from="the shell")
    with pytest.raises(ScopeElsewhere) as refused:
        refuse_elsewhere(State(resources=dict(RESOURCES), cloud=HERE), Scope("p-2", "RegionOne"), shell)
    assert str(refused.value).startswith("the shell: OS_PROJECT_ID=p-2 logs in to project p-2, region RegionOne,")
    assert str(refused.value).endswith("log in to project p-1 again, or end them from there first")
    named = CloudAuth(cloud="test", config_file=Path("/p/clouds.yaml"))
    with pytest.raises(ScopeElsewhere) as refused:
        refuse_elsewhere(State(resources=dict(RESOURCES), cloud=HERE), Scope("p-2", "RegionTwo"), named)
    assert str(refused.value).startswith('/p/clouds.yaml: entry "test" logs in to project p-2, region RegionTwo,')
    assert "log in to project p-1 and region RegionOne again" in str(refused.value)


# ---------------------------------------------------------------------------------------------- where a login lands


class Config:
    def __init__(self, region: str | None):
        self.region = region

    def get_region_name(self, service_type: str) -> str | None:
        return self.region

    def get_interface(self, service_type: str) -> str:
        return "public"


class Catalog:
    def __init__(self, region: str | None):
        self.region = region

    def endpoint_data_for(self, service_type: str, interface: str):
        if self.region is None:
            raise EndpointNotFound("public endpoint for compute service not found")
        return SimpleNamespace(region_name=self.region)


def a_login(project: str | None = "p-1", region: str | None = "RegionOne", catalog: str | None = None):
    """openstacksdk's connection as scope_of reads it: the token's project, the configured region, the catalog."""
    access = SimpleNamespace(service_catalog=Catalog(catalog))
    session = SimpleNamespace(auth=SimpleNamespace(get_access=lambda session: access))
    return SimpleNamespace(current_project_id=project, config=Config(region), session=session)


def test_the_scope_is_the_token_s_project_and_the_compute_region():
    assert scope_of(a_login()) == HERE
    # no region set: the one keystoneauth picks from the catalog, so a state records where things really went
    assert scope_of(a_login(region=None, catalog="ru-9")) == Scope("p-1", "ru-9")
    assert scope_of(a_login(project=None, region="", catalog=None)) == Scope(None, None)


# ---------------------------------------------------------------------------------------------- the commands


def test_every_login_through_connect_is_refused_before_the_command_sees_the_cloud(dead_cloud_project, monkeypatch):
    before = rented(dead_cloud_project, THERE)
    monkeypatch.setattr(connect_module, "login", lambda auth, kept=None: a_login())
    settings = config.load(dead_cloud_project)
    with pytest.raises(ScopeElsewhere, match="region RegionOne, but this folder's server, data volume are in"):
        connect_module.connect(settings)
    for command in (["status"], ["stop"], ["dry-run"], ["destroy", "--i-understand-data-loss"]):
        result = runner.invoke(app, [*command, "-p", str(dead_cloud_project)])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert 'clouds.yaml: entry "test" logs in to project p-1, region RegionOne' in lines[0]
    assert StateStore(dead_cloud_project).path.read_bytes() == before


def test_status_along_a_kept_route_refuses_too_and_forgets_nothing(dead_cloud_project, standin):  # noqa: F811
    """The fast path logs in not at all: the route keeps where its login landed, and status compares that."""
    a_cloud(standin)
    keep_route(dead_cloud_project, route_to(standin))
    before = rented(dead_cloud_project, THERE)
    result = status(dead_cloud_project)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 2 and result.stdout == "", result.stderr
    said = (
        f'error: {dead_cloud_project / "clouds.yaml"}: entry "test" logs in to project p-1, region RegionOne, but '
        "this folder's server, data volume are in project p-1, region RegionTwo (.gpu-rent/state.json): refused"
    )
    assert len(lines) == 1 and lines[0].startswith(said), lines
    assert StateStore(dead_cloud_project).path.read_bytes() == before  # no id popped, no phase moved


def test_status_records_where_a_state_from_before_the_record_is_once_it_sees_one_of_its_ids(
    dead_cloud_project,
    standin,  # noqa: F811
):
    a_cloud(standin)
    keep_route(dead_cloud_project, route_to(standin))
    rented(dead_cloud_project, None, {"server": "a222a93e"})  # the stand-in's server
    assert status(dead_cloud_project).returncode == 0
    saved = json.loads(StateStore(dead_cloud_project).path.read_text())
    assert saved["cloud"] == {"project_id": "p-1", "region": "RegionOne"}


def up_on_a_stand_in(project: Path, monkeypatch, view: cloud.CloudView) -> State:
    """up as far as its playbook, every cloud call stood in for; the state as up saved it."""
    monkeypatch.setattr(rental_module, "connect", lambda settings: "conn")
    monkeypatch.setattr(rental_module, "scope_of", lambda conn: HERE)
    monkeypatch.setattr(rental_module.cloud, "observe", lambda conn, name: view)
    monkeypatch.setattr(rental_module, "plan", lambda *a: [rental_module.PlanItem("server", "s", "create")])
    monkeypatch.setattr(up_head_start, "ask", lambda conn, questions: {})
    monkeypatch.setattr(up_head_start, "start", lambda conn, q, found, handover: {"early": {}})
    rental = Rental(config.load(project, with_cloud=False), say=lambda _: None, progress=lambda _: None)
    saved: list[State] = []
    monkeypatch.setattr(rental, "_run", lambda state, *a: saved.append(rental.store.load()))
    rental.up(lambda items: True)
    return saved[0]


def test_up_records_where_it_rents_before_its_head_start_can_make_anything(dead_cloud_project, monkeypatch):
    assert up_on_a_stand_in(dead_cloud_project, monkeypatch, cloud.CloudView()).cloud == HERE


def test_up_takes_a_state_from_before_the_record_for_here_only_when_the_cloud_here_lists_one_of_its_ids(
    dead_cloud_project, monkeypatch
):
    rented(dead_cloud_project, None, {"data_volume": "d-old"})
    assert up_on_a_stand_in(dead_cloud_project, monkeypatch, cloud.CloudView()).cloud is None
    there = cloud.CloudView(volumes=(cloud.Volume("d-old", "gpu-rent-data", "available", 4, "ru-7a", "data"),))
    assert up_on_a_stand_in(dead_cloud_project, monkeypatch, there).cloud == HERE


def test_doctor_says_where_the_state_s_resources_are_and_whether_this_login_is_there(dead_cloud_project):
    settings = config.load(dead_cloud_project)
    assert state_cloud_check(settings, HERE).detail == "no resources recorded in a project and region yet"
    rented(dead_cloud_project, HERE)
    check = state_cloud_check(settings, HERE)
    assert check.ok and check.detail == "its resources are in project p-1, region RegionOne, where this login is"
    check = state_cloud_check(settings, THERE)
    assert not check.ok and "logs in to project p-1, region RegionTwo, but this folder's" in check.detail


def test_doctor_names_where_each_os_value_came_from_before_it_logs_in(dead_cloud_project, monkeypatch):
    monkeypatch.setenv("OS_REGION_NAME", "RegionTwo")  # an openrc of another region, sourced in this shell
    result = runner.invoke(app, ["doctor", "-p", str(dead_cloud_project)])
    assert result.exit_code == 4, result.output  # the cloud on port 9 never answers
    lines = result.output.splitlines()
    clouds = dead_cloud_project / "clouds.yaml"
    assert lines[2] == (
        f'ok   login values: OS_CLIENT_CONFIG_FILE, OS_CLOUD from .env; the rest from clouds.yaml entry "test" '
        f"({clouds}); the shell's OS_REGION_NAME ignored (.env is the whole login)"
    )
    assert lines[3].startswith("FAIL auth: ")
