"""status tells the long operation the state records (SPEC §11): the one running now, or the one a killed command
left half done, with what resumes it."""

from __future__ import annotations

import io
from datetime import datetime

from rich.console import Console

from gpu_rent.project.state import Phase, State, StateStore
from gpu_rent.rental.report import StatusReport, operation_line

BEGUN = "2026-12-06T03:05:00Z"
OPERATION = {"command": "up", "step": "renting and bootstrapping", "pid": 4242, "started_at": BEGUN}


def local(iso: str) -> str:
    return f"{datetime.fromisoformat(iso.replace('Z', '+00:00')).astimezone():%H:%M}"


def test_a_running_operation_names_its_step_and_process():
    assert operation_line(OPERATION, running=True) == f"up (renting and bootstrapping, begun {local(BEGUN)}), pid 4242"


def test_one_no_command_runs_any_more_says_it_did_not_finish_and_what_resumes_it():
    line = operation_line(OPERATION, running=False)
    assert line.startswith(f"up (renting and bootstrapping, begun {local(BEGUN)}) ended before it finished")
    assert line.endswith("run the same command again, it resumes")


def test_no_record_or_a_damaged_one_says_nothing_or_what_it_can():
    assert operation_line(None, running=False) is None
    assert operation_line({"step": "x"}, running=False) is None
    damaged = {"command": "stop", "started_at": "yesterday"}
    assert operation_line(damaged, running=True) == "stop (no step recorded)"


def test_status_shows_and_serialises_it():
    report = StatusReport(project="/p", cloud="c", phase=Phase.PROVISIONING, phase_note="n", server=None,
                          address=None, volumes=[], leftovers=[], minutes_alive=None, cost_so_far=None,
                          price_per_hour=None, operation=OPERATION)  # fmt: skip
    out = io.StringIO()
    report.render(Console(file=out, width=200))
    assert "unfinished up (renting and bootstrapping" in out.getvalue()
    assert report.to_json()["operation"] == {**OPERATION, "running": False}


def test_the_record_survives_a_killed_command_in_the_state_file(tmp_path):
    """What status reads: the state file as a command killed mid-playbook leaves it (begun, never ended)."""
    store = StateStore(tmp_path)
    state = State()
    state.begin_operation("up", "renting and bootstrapping")
    store.save(state)
    assert store.load().operation["step"] == "renting and bootstrapping"
