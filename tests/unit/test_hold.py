"""gpu-rent hold: when a hold ends, and the mistakes it refuses (SPEC §7)."""

from datetime import datetime, timedelta

import pytest

from gpu_rent.project.errors import ConfigError
from gpu_rent.rental.hold import hold_until

NOW = datetime(2026, 11, 29, 20, 0).timestamp()


def test_no_argument_holds_for_idle_minutes_from_now():
    assert hold_until(NOW, idle_minutes=30) == NOW + 30 * 60


def test_minutes_replace_an_earlier_hold_from_now():
    assert hold_until(NOW, idle_minutes=30, minutes=90) == NOW + 90 * 60


def test_until_takes_an_iso_time_local_or_zoned():
    later = datetime(2026, 11, 29, 21, 30)
    assert hold_until(NOW, 30, until="2026-11-29T21:30") == later.timestamp()
    zoned = (datetime.fromtimestamp(NOW).astimezone() + timedelta(hours=2)).isoformat()
    assert hold_until(NOW, 30, until=zoned) == pytest.approx(NOW + 7200)


def test_a_month_is_the_longest_hold_and_idle_minutes_beyond_it_are_cut_to_it():
    assert hold_until(NOW, 30, minutes=30 * 24 * 60) == NOW + 30 * 24 * 3600
    assert hold_until(NOW, idle_minutes=int("9" * 400)) == NOW + 30 * 24 * 3600


def test_clear_gives_no_hold():
    assert hold_until(NOW, 30, clear=True) is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"until": "2026-11-29T19:59"}, "that is in the past"),
        ({"until": "tomorrow"}, "not an ISO time"),
        ({"minutes": 0}, "a hold lasts at least 1 minute"),
        ({"minutes": -5}, "a hold lasts at least 1 minute"),
        ({"minutes": 10**12}, "--minutes 1000000000000: a hold lasts 30 days (43200 minutes) at the most"),
        ({"minutes": 10, "until": "2026-11-29T21:30"}, "--minutes and --until do not go together"),
        ({"minutes": 10, "clear": True}, "--minutes and --clear do not go together"),
        ({"minutes": 30 * 24 * 60 + 1}, "a hold lasts 30 days (43200 minutes) at the most"),
        ({"minutes": int("9" * 400)}, "a hold lasts 30 days (43200 minutes) at the most"),
        ({"until": "2026-12-30T20:01"}, "more than 30 days away"),
        ({"until": "9999-12-31T23:59"}, "more than 30 days away"),
    ],
)
def test_mistakes_are_one_line(kw, message):
    with pytest.raises(ConfigError) as caught:
        hold_until(NOW, 30, **kw)
    assert message in str(caught.value) and "\n" not in str(caught.value)
