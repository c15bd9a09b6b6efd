"""The watchdog's move for each server state Nova can show."""

import pytest

from gpu_rent.watch.decision import Act, judge, may_recover, token_due


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
    assert "not re-created" in verdict.why


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
