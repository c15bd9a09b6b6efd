"""The watchdog's move for each server state Nova can show."""

import pytest

from gpu_rent.watch.decision import KILLER_PATIENCE_TICKS, Act, Blind, blind_killer, judge, may_recover, token_due


@pytest.mark.parametrize(
    ("status", "vm_state", "task_state", "act"),
    [
        ("ACTIVE", "active", None, Act.OK),
        ("SHELVED_OFFLOADED", "shelved_offloaded", None, Act.RECOVER),
        ("SHELVED", "shelved", None, Act.RECOVER),
        ("SHUTOFF", "stopped", None, Act.RECOVER),
        ("EXPIRED", None, None, Act.RECOVER),
        ("SHELVED_OFFLOADED", "shelved_offloaded", "unshelving", Act.WAIT),  # the cloud is already at it
        ("ACTIVE", "active", "shelving", Act.WAIT),
        ("BUILD", "building", None, Act.WAIT),
        ("HARD_REBOOT", "active", None, Act.WAIT),
        ("ERROR", "error", None, Act.FATAL),
        ("ACTIVE", "active", "deleting", Act.GONE),
        ("DELETED", "deleted", None, Act.GONE),
        (None, None, None, Act.GONE),
        ("SOMETHING_NEW", "weird", None, Act.UNKNOWN),
    ],
)
def test_each_state_gets_its_move(status, vm_state, task_state, act):
    assert judge(status, vm_state, task_state).act is act


def test_error_is_never_retried_and_names_the_raw_state_and_fault():
    verdict = judge("ERROR", "error", None, "No valid host was found")
    assert verdict.act is Act.FATAL
    assert "status ERROR, vm_state error" in verdict.why and "No valid host was found" in verdict.why
    assert "not re-created" in verdict.why and "deleting it (the volumes stay)" in verdict.why


def test_an_unknown_state_is_logged_raw_and_left_alone():
    verdict = judge("SOMETHING_NEW", "weird", None)
    assert "status SOMETHING_NEW, vm_state weird" in verdict.why and "left alone" in verdict.why


def test_the_token_is_renewed_before_it_expires_not_after():
    now = 1_000_000.0
    assert not token_due(now + 3600, now)
    assert token_due(now + 600, now)  # within the 15-minute margin
    assert token_due(now - 1, now)
    assert token_due(None, now)


def test_three_recoveries_within_the_hour_are_the_limit():
    now = 10_000.0
    assert may_recover([], now)
    assert may_recover([now - 100, now - 50], now)
    assert not may_recover([now - 100, now - 50, now - 10], now)
    assert may_recover([now - 4000, now - 3700, now - 10], now)  # old ones no longer count


# ------------------------------------------------------------------ a killer that cannot carry out its verdict

T0 = 1_800_000_000.0  # the VM's clock; the laptop's is 7 min behind in these cases: never compared with it
SKEW = -420.0


def report(**kw) -> dict:
    return {"server_id": "s1", "tick_at": T0, "tick_seconds": 60, "action": "keep", "reason": "queue empty",
            "fires_at": None, "credential": {"state": "ok"}} | kw  # fmt: skip


def test_a_killer_refused_at_its_own_deadline_has_its_vm_deleted_by_the_laptop_at_once():
    seen = T0 + SKEW
    said = report(
        action="delete",
        reason="queue empty, idle for 30 min",
        acted="CREDENTIAL REFUSED, cannot delete this server: Nova refused GET /v2.1/servers/s1 (HTTP 401)",
    )
    assert blind_killer(said, seen, seen + 1, 0) == (
        Blind.DELETE,
        "the idle-killer decided the VM goes (queue empty, idle for 30 min) but cannot delete it: CREDENTIAL "
        "REFUSED, cannot delete this server: Nova refused GET /v2.1/servers/s1 (HTTP 401)",
    )  # fmt: skip


def test_a_failed_delete_is_given_its_ticks_before_the_laptop_acts():
    said = report(action="delete", acted="delete failed, tried again next tick: Nova: HTTP 503")
    seen = T0 + SKEW
    assert [blind_killer(said, seen, seen + 1, n) for n in range(KILLER_PATIENCE_TICKS)] == [None] * 3
    act, why = blind_killer(said, seen, seen + 1, KILLER_PATIENCE_TICKS)
    assert act is Blind.DELETE and why.startswith("the idle-killer's delete failed 3 ticks in a row")


def test_a_killer_silent_past_its_verdict_or_its_deadline_has_its_vm_deleted():
    seen = T0 + SKEW
    # patience: 3 ticks and the 300 s a slow tick may take past its interval (its unit's TimeoutStartSec)
    asked = report(action="delete", acted="asked Nova to delete server s1")  # and the server is still ACTIVE
    assert blind_killer(asked, seen, seen + 479, 0) is None
    assert blind_killer(asked, seen, seen + 481, 0)[0] is Blind.DELETE
    due = report(fires_at=T0 + 600)  # idle, fires in 10 min, then the same report read again and again
    assert blind_killer(due, seen, seen + 600 + 479, 0) is None
    act, why = blind_killer(due, seen, seen + 600 + 481, 0)
    assert act is Blind.DELETE and "silent past its deadline" in why


@pytest.mark.parametrize(
    "said",
    [report(), report(reason="3 waiting gens"), report(fires_at=T0 + 600)],
    ids=["idle-no-deadline", "working", "deadline-ahead"],
)  # fmt: skip
def test_a_killer_that_ticks_is_left_to_decide_whatever_the_clocks(said):
    seen = T0 + SKEW
    for later in (1, 30, 3000):  # a report read again and again, its tick new each time: never acted on
        assert blind_killer(said, seen + later, seen + later + 1, 0) is None


def test_work_with_a_refused_credential_is_told_once_and_never_deleted():
    refused = {"state": "refused", "message": "Keystone refused the credential (HTTP 401)"}
    said = report(reason="2 running gens", credential=refused)
    seen = T0 + SKEW
    assert blind_killer(said, seen, seen + 1, 0) == (
        Blind.NOTIFY, "the idle-killer cannot delete this VM: Keystone refused the credential (HTTP 401)")  # fmt: skip
    assert blind_killer(said, seen, seen + 10_000, 0)[0] is Blind.NOTIFY  # no deadline: nothing to carry out
