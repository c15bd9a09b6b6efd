"""`gpu-rent hold`: until when the idle-killer must leave the VM alone (SPEC §7).

No argument holds for IDLE_MINUTES from now; --minutes N holds for N minutes
from now, replacing (not adding to) an earlier hold; --until takes an ISO time
(without a zone: this machine's local time); --clear removes the hold. The
answer is a unix time the VM's idle-killer compares with its clock, or None;
playbooks/hold.yml writes it on the VM (gpu_rent/on_vm/paths.py HOLD_FILE).
"""

from __future__ import annotations

from datetime import datetime

from gpu_rent.project.errors import ConfigError

WHERE = "arguments"
# A hold keeps a GPU billing through any idleness: one past a month is a typo (minutes for seconds, a year
# wrong), not a plan, and a number that large also breaks the clock arithmetic. `stop` and `up` do it cheaper.
MAX_HOLD_MINUTES = 30 * 24 * 60


def hold_until(
    now: float, idle_minutes: int, minutes: int | None = None, until: str | None = None, clear: bool = False
) -> float | None:
    """The unix time the hold lasts until; None for --clear. Bad input raises ConfigError (one line)."""
    given = [name for name, value in (("--minutes", minutes), ("--until", until), ("--clear", clear)) if value]
    if len(given) > 1:
        raise ConfigError(WHERE, f"{' and '.join(given)} do not go together: give one of them")
    if clear:
        return None
    if until is not None:
        try:
            moment = datetime.fromisoformat(until.strip())
        except ValueError:
            raise ConfigError(WHERE, f"--until {until}: not an ISO time such as 2026-11-29T21:30") from None
        try:
            stamp = moment.timestamp()  # a time without a zone is this machine's local time
        except (OverflowError, OSError, ValueError):
            raise ConfigError(WHERE, f"--until {until}: not a time this machine can reckon with") from None
        if stamp <= now:
            raise ConfigError(WHERE, f"--until {until}: that is in the past; a hold must end later than now")
        if stamp - now > MAX_HOLD_MINUTES * 60:
            raise ConfigError(WHERE, f"--until {until}: more than 30 days away; a hold lasts 30 days at the most")
        return stamp
    if minutes is not None and minutes <= 0:
        raise ConfigError(WHERE, f"--minutes {minutes}: a hold lasts at least 1 minute")
    if minutes is not None and minutes > MAX_HOLD_MINUTES:
        raise ConfigError(WHERE, f"--minutes {minutes}: a hold lasts 30 days ({MAX_HOLD_MINUTES} minutes) at the most")
    return now + 60 * min(minutes if minutes is not None else idle_minutes, MAX_HOLD_MINUTES)
