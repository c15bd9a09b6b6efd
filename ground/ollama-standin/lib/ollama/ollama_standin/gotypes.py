"""What Go's standard library makes of the values the API carries, so the stand-in's JSON reads as upstream's.

- time.Time's MarshalJSON (RFC 3339 with nanoseconds, trailing zeros cut, "Z" for a zero offset);
- time.ParseDuration, with its error messages;
- strconv.ParseBool.
"""

import json
import re
import time
from datetime import UTC, datetime

MAX_DURATION = (1 << 63) - 1  # math.MaxInt64 nanoseconds: upstream's "forever"
SECOND = 1_000_000_000
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": SECOND, "m": 60 * SECOND,
          "h": 3600 * SECOND}  # fmt: skip
_DIGITS = re.compile(r"[0-9]*")
_UNIT = re.compile(r"[^0-9.]*")


def quote(s: str) -> str:
    """strconv.Quote, for the strings Go puts in its error messages."""
    return json.dumps(s, ensure_ascii=False)


def format_time(ns: int | None = None, utc: bool = False) -> str:
    """time.Time.MarshalJSON of time.Now() (local zone, as Go's) or time.Now().UTC()."""
    ns = time.time_ns() if ns is None else ns
    seconds, fraction = divmod(ns, SECOND)
    stamp = datetime.fromtimestamp(seconds, UTC)
    if not utc:
        stamp = stamp.astimezone()
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    offset = int(stamp.utcoffset().total_seconds())
    if offset == 0:
        return text + "Z"
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


def parse_duration(text: str) -> int:
    """time.ParseDuration in nanoseconds; ValueError carries Go's message."""
    invalid = ValueError(f"time: invalid duration {quote(text)}")
    s, negative = text, False
    if s[:1] in ("-", "+"):
        negative, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise invalid
        whole = _DIGITS.match(s).group()
        s = s[len(whole) :]
        fraction = ""
        if s.startswith("."):
            s = s[1:]
            fraction = _DIGITS.match(s).group()
            s = s[len(fraction) :]
        if not whole and not fraction:
            raise invalid
        unit_name = _UNIT.match(s).group()
        s = s[len(unit_name) :]
        if not unit_name:
            raise ValueError(f"time: missing unit in duration {quote(text)}")
        if unit_name not in _UNITS:
            raise ValueError(f"time: unknown unit {quote(unit_name)} in duration {quote(text)}")
        unit = _UNITS[unit_name]
        value = int(whole or "0")
        if value > (1 << 63) // unit:
            raise invalid
        value *= unit
        if fraction:  # leadingFraction, then float64(f) * (float64(unit) / scale) as Go does
            value += int(float(int(fraction)) * (unit / 10 ** len(fraction)))
        total += value
        if total > 1 << 63:
            raise invalid
    if negative:
        return -total
    if total > MAX_DURATION:
        raise invalid
    return total


def parse_bool(text: str) -> bool:
    """strconv.ParseBool; ValueError for anything else."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f"strconv.ParseBool: parsing {quote(text)}: invalid syntax")


def duration_string(ns: int) -> str:
    """time.Duration.String, for log lines."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < SECOND:
        unit, scale = ("µs", 1_000) if ns < 1_000_000 else ("ms", 1_000_000)
        whole, rest = divmod(ns, scale)
        digits = len(str(scale)) - 1
        return f"{sign}{whole}" + (f".{rest:0{digits}d}".rstrip("0") if rest else "") + unit
    hours, rest = divmod(ns, 3600 * SECOND)
    minutes, rest = divmod(rest, 60 * SECOND)
    seconds, fraction = divmod(rest, SECOND)
    text = f"{seconds}" + (f".{fraction:09d}".rstrip("0") if fraction else "") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def go_json(obj) -> bytes:
    """encoding/json's bytes: compact, UTF-8, and <, >, &, U+2028, U+2029 escaped as Go escapes them."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(char, escaped)
    return text.encode()


def human_bytes(b: int) -> str:
    """format/bytes.go HumanBytes (decimal units)."""
    for limit, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if b >= limit:
            value = b / limit
            if value >= 10 or value == int(value):
                return f"{int(value)} {unit}"
            return f"{value:.1f} {unit}"
    return f"{b} B"
