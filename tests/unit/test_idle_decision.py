"""The idle-killer's decision, rule by rule (SPEC §7): what keeps a VM, and when it goes."""

import pytest

from gpu_rent.idle_decision import DELETE, KEEP, Decision, Limits, Memory, Observation, decide

MIN = 60.0
LIMITS = Limits(idle_seconds=30 * MIN, grace_seconds=45 * MIN, cap_seconds=60 * MIN)
BOOT = 1_000_000.0
LATE = BOOT + 50 * MIN  # past the grace


def running(**counters) -> dict:
    base = {"waiting_gens": 0, "live_gens": 0, "waiting_backends": 0, "loading_models": 0}
    return {"status": base | counters, "backend_status": {"status": "running", "class": "", "message": ""}}


def seen(now: float = LATE, **kw) -> Observation:
    return Observation(now=now, booted_at=BOOT, **({"status": running()} | kw))


def run(ticks: list[Observation], memory: Memory | None = None) -> list[Decision]:
    """Tick after tick, each handing its memory to the next, as the program does."""
    out, memory = [], memory or Memory()
    for tick in ticks:
        decision = decide(tick, LIMITS, memory)
        out.append(decision)
        memory = decision.memory
    return out


def test_an_empty_queue_deletes_exactly_idle_minutes_after_it_went_empty():
    ticks = [seen(LATE + m * MIN) for m in range(0, 31)]
    decisions = run(ticks)
    assert all(d.action == KEEP for d in decisions[:30])
    assert decisions[0].fires_at == LATE + 30 * MIN and decisions[0].reason == "queue empty, idle for 0 min"
    assert decisions[30].action == DELETE and "idle for 30 min" in decisions[30].reason


@pytest.mark.parametrize(
    ("counters", "named"),
    [
        ({"waiting_gens": 2}, "2 waiting gens"),
        ({"live_gens": 1}, "1 live gens"),
        ({"waiting_backends": 1}, "1 waiting backends"),
        ({"loading_models": 1}, "1 loading models"),
    ],
)
def test_any_work_keeps_the_vm_names_it_and_restarts_the_clock(counters, named):
    first, busy, after = run([seen(LATE), seen(LATE + 29 * MIN, status=running(**counters)), seen(LATE + 31 * MIN)])
    assert first.action == KEEP
    assert busy.action == KEEP and busy.reason == named and busy.fires_at is None
    assert busy.memory.idle_since is None
    assert after.action == KEEP and after.fires_at == LATE + 61 * MIN  # the clock began again


def test_the_comfyui_queue_counts_as_work():
    decision = decide(seen(comfy_queue=3), LIMITS, Memory(idle_since=LATE - 40 * MIN))
    assert decision.action == KEEP and decision.reason == "3 in the ComfyUI queue"


def test_a_hold_keeps_the_vm_until_it_ends_then_the_clock_runs_from_there():
    hold = LATE + 90 * MIN
    decisions = run([seen(LATE, hold_until=hold), seen(hold - MIN, hold_until=hold), seen(hold, hold_until=hold)])
    assert [d.action for d in decisions] == [KEEP, KEEP, KEEP]
    assert decisions[0].reason == "hold for 90 min more"
    assert decisions[2].fires_at == hold + 30 * MIN  # a hold in the past is no hold


def test_the_grace_after_boot_keeps_even_a_long_empty_queue():
    decision = decide(seen(BOOT + 44 * MIN), LIMITS, Memory(idle_since=BOOT - 100 * MIN))
    assert decision.action == KEEP and decision.reason == "grace after boot, 1 min left"
    assert decision.memory.idle_since is None


def test_the_seeding_lock_keeps_the_vm_while_it_is_valid_and_not_after():
    assert decide(seen(seeding_until=LATE + 1), LIMITS, Memory(idle_since=0)).action == KEEP
    stale = decide(seen(seeding_until=LATE - 1), LIMITS, Memory(idle_since=LATE - 31 * MIN))
    assert stale.action == DELETE  # a crashed seeding run cannot keep it alive for good


def test_a_download_being_written_keeps_the_vm_and_is_named():
    decision = decide(seen(downloads=("Lora/x.safetensors.download.tmp", "b.tmp")), LIMITS, Memory(idle_since=0))
    assert decision.action == KEEP
    assert decision.reason == "download of Lora/x.safetensors.download.tmp and 1 more"


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"status": None, "error": "connection refused"}, "SwarmUI not answering (connection refused)"),
        ({"status": {"error_id": "invalid_session_id"}}, "SwarmUI answers with an error (invalid_session_id)"),
        ({"status": {"backend_status": {"status": "loading"}}}, "backend loading, not running"),
        ({"status": {"backend_status": {"status": "idle"}}}, "backend idle, not running"),  # idle: none started
        ({"status": {"backend_status": {"status": "errored"}}}, "backend errored, not running"),
    ],
)
def test_trouble_counts_as_busy_up_to_the_cap_then_the_clock_runs(kw, named):
    ticks = [seen(LATE + m * MIN, **kw) for m in (0, 59, 60, 89, 90)]
    first, before_cap, at_cap, before_end, end = run(ticks)
    assert first.action == KEEP and first.reason == f"{named}: counted as busy for 60 min more"
    assert before_cap.action == KEEP and before_cap.fires_at is None
    assert at_cap.action == KEEP and at_cap.fires_at == LATE + 90 * MIN and named in at_cap.reason
    assert before_end.action == KEEP
    assert end.action == DELETE and named in end.reason


def test_a_download_that_ends_past_the_cap_starts_the_full_idle_time_not_a_clock_from_the_past():
    down = {"status": None, "error": "connection refused"}
    ticks = [seen(LATE, **down), seen(LATE + 30 * MIN, downloads=("Lora/x.download.tmp",), **down)]
    ticks += [seen(LATE + m * MIN, **down) for m in (120, 149, 150)]
    _, downloading, ended, before_end, end = run(ticks)
    assert downloading.action == KEEP and downloading.reason.startswith("download of")
    assert ended.action == KEEP and ended.fires_at == LATE + 150 * MIN  # 30 min from the first idle look
    assert before_end.action == KEEP and end.action == DELETE


def test_some_loading_is_a_running_backend():
    status = running(loading_models=1) | {"backend_status": {"status": "some_loading"}}
    decision = decide(seen(status=status), LIMITS, Memory())
    assert decision.action == KEEP and decision.reason == "1 loading models"


def test_swarmui_answering_again_ends_the_trouble_and_its_count():
    down, back = run([seen(LATE, status=None), seen(LATE + MIN)])
    assert down.memory.troubled_since == LATE
    assert back.memory.troubled_since is None and back.reason == "queue empty, idle for 0 min"


def test_garbage_counters_are_read_as_zero_not_as_a_crash():
    decision = decide(seen(status=running(waiting_gens="x", live_gens=None)), LIMITS, Memory())
    assert decision.action == KEEP and decision.reason.startswith("queue empty")


def test_every_reason_is_one_line():
    cases = [seen(status=None, error="Traceback\n  line\nOSError"), seen(downloads=("x",)), seen(hold_until=LATE + 1)]
    for case in cases:
        assert "\n" not in decide(case, LIMITS, Memory()).reason
