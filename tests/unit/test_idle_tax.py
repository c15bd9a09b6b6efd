"""bench/idle_tax.py's pure parts: the billing rules, the oracle on a hand-made trace, the replay of the VM's own
decision and of the anchors' timers, the warm-up it takes, and the traces in git being what their seed writes."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from bench import _traces
from bench._report import FIGURES, leave
from bench.idle_tax import (
    GRACE_MINUTES,
    HOUR,
    IDLE_MINUTES,
    WARM_UP_LAST,
    Work,
    clock_hours,
    dstack,
    gpu_rent,
    oracle,
    per_minute,
    per_second,
    replay,
    skypilot,
    warm_up_seconds,
)

WARM = 20.0


def at(hour: int, minute: int = 0, second: float = 0) -> float:
    """A moment of the traces' Monday (Moscow midnight is a whole UTC hour: clock hours line up)."""
    return _traces.WEEK_START + hour * 3600 + minute * 60 + second


# ------------------------------------------------------------------ billing rules
def test_a_61_minute_rental_across_an_hour_boundary_is_two_selectel_hours():
    assert clock_hours([(at(10, 30), at(11, 31))]) == 2 * HOUR
    assert clock_hours([(at(10), at(11, 1))]) == 2 * HOUR


def test_a_rental_inside_one_clock_hour_is_one_and_its_end_on_the_hour_begins_no_other():
    assert clock_hours([(at(10, 5), at(10, 55))]) == HOUR
    assert clock_hours([(at(10), at(11))]) == HOUR
    assert clock_hours([(at(10, 30), at(11, 29))]) == 2 * HOUR  # 59 minutes, two hours begun


def test_selectel_bills_an_hour_once_however_many_rentals_touch_it():
    # the hour's peak consumption is one GPU: a delete at 10:10 and a new server at 10:40 pay hour 10 once
    assert clock_hours([(at(10, 5), at(10, 10)), (at(10, 40), at(10, 50))]) == HOUR
    assert clock_hours([(at(10, 5), at(10, 10)), (at(10, 40), at(11, 5))]) == 2 * HOUR


def test_per_minute_bills_each_minute_begun_of_each_rental():
    assert per_minute([(0, 61)]) == 120
    assert per_minute([(0, 60), (100, 130)]) == 120


def test_per_second_bills_the_seconds_with_a_minute_at_least():
    assert per_second([(0, 30)]) == 60
    assert per_second([(0, 61.5), (100, 220)]) == 181.5


# ------------------------------------------------------------------ the work and the replay
def test_a_rent_makes_its_work_wait_and_joins_the_work_it_now_runs_into():
    work = Work([(0, 100), (110, 200), (300, 400)])
    work.wait_for_gpu(0, 20)
    assert work.spans == [(20.0, 200.0), (300.0, 400.0)]
    assert work.busy(20) and not work.busy(19) and not work.busy(200)
    assert work.last_end(250) == 200 and work.last_end(350) == 200 and work.last_start(350) == 300


def test_gpu_rent_deletes_idle_minutes_after_the_first_tick_that_found_no_work():
    # an hour of work, past the grace; ticks every minute from 10:01, the work (10:00:20-11:00:20) last seen at
    # 11:00; the clock starts at 11:01 and the deadline before the next tick is waited for
    out = replay([(at(10), at(11))], gpu_rent("off"), WARM)
    assert out.rentals == [(at(10), at(11, 1) + IDLE_MINUTES * 60)]
    assert out.rerents == 0 and out.waited == WARM


def test_a_short_burst_keeps_the_vm_for_the_grace_and_then_idle_minutes():
    # the grace runs from the first tick (10:01, booted_at in the status file); idle from its end
    out = replay([(at(10), at(10, 5))], gpu_rent("off"), WARM)
    assert out.rentals == [(at(10), at(10, 1) + GRACE_MINUTES * 60 + IDLE_MINUTES * 60)]


def test_billing_hour_clock_uses_the_hour_paid_up_to_its_margin():
    out = replay([(at(10), at(11))], gpu_rent("clock"), WARM)
    assert out.rentals == [(at(10), at(11, 57))]  # the 11:31 deadline is in hour 11: it goes 3 min before 12:00


def test_work_after_a_delete_rents_again_and_waits():
    out = replay([(at(10), at(11)), (at(14), at(14, 30))], gpu_rent("off"), WARM)
    assert [rented for rented, _ in out.rentals] == [at(10), at(14)]
    assert out.rerents == 1 and out.waited == 2 * WARM


def test_skypilot_stops_at_its_first_check_idle_minutes_after_the_last_active_one():
    out = replay([(at(10), at(10, 10))], skypilot(5), WARM)
    assert out.rentals == [(at(10), at(10, 15))]  # last seen busy at the 10:10 check


def test_dstack_terminates_past_idle_duration_after_the_job_ended():
    ((_, gone),) = replay([(at(10), at(10, 10))], dstack(5), WARM).rentals
    assert at(10, 15, WARM) < gone <= at(10, 15, WARM + 7)


def test_the_oracle_keeps_through_a_gap_that_bills_no_hour_and_deletes_before_one_that_does():
    spans = [(at(10, 5), at(10, 10)), (at(10, 50), at(10, 55)), (at(13, 20), at(13, 30))]
    out = replay(spans, oracle(clock_hours), WARM)
    assert out.rentals == [(at(10, 5), at(10, 55)), (at(13, 20), at(13, 30, WARM))]
    assert clock_hours(out.rentals) == 2 * HOUR and out.rerents == 1  # hours 10 and 13, not 11 and 12
    across = replay([(at(10, 40), at(10, 50)), (at(11, 10), at(11, 20))], oracle(clock_hours), WARM)
    assert len(across.rentals) == 1  # hours 10 and 11 are billed either way: keeping spares a wait


def test_the_per_second_oracle_deletes_at_every_gap_longer_than_the_warm_up():
    spans = [(at(10, 5), at(10, 10)), (at(10, 10, 15), at(10, 20)), (at(10, 50), at(10, 55))]
    out = replay(spans, oracle(per_second), WARM)
    assert [rented for rented, _ in out.rentals] == [at(10, 5), at(10, 50)]


# ------------------------------------------------------------------ the warm-up and the traces
def test_the_warm_up_is_the_one_warm_up_left_in_this_run_else_the_last_measured(tmp_path, monkeypatch):
    monkeypatch.delenv(FIGURES, raising=False)
    assert warm_up_seconds(None)[0] == WARM_UP_LAST
    monkeypatch.setenv(FIGURES, str(tmp_path))
    assert warm_up_seconds(None)[0] == WARM_UP_LAST
    leave("warm_up", warm_up_seconds=33.5)
    seconds, why = warm_up_seconds(None)
    assert seconds == 33.5 and "this run" in why
    assert warm_up_seconds(12.0)[0] == 12.0


def test_the_traces_in_git_are_what_their_seed_writes(tmp_path):
    written = _traces.write(tmp_path)
    for path in written:
        assert json.loads(path.read_text()) == json.loads((_traces.TRACES / path.name).read_text()), path.name
    assert [t["name"] for t in _traces.load()] == list(_traces.SHAPES)


@pytest.mark.parametrize("trace", _traces.load(), ids=lambda trace: trace["name"])
def test_a_trace_is_a_week_of_disjoint_work_in_order(trace):
    work = trace["work"]
    assert work and all(0 <= a < b for a, b in work)
    assert all(b <= c for (_, b), (c, _) in pairwise(work))
    assert work[0][0] < 7 * 86400
