"""Log lines in the shape upstream's log/slog text handler writes them to stderr (logutil/logutil.go)."""

import json
import sys
from datetime import datetime


def log(level: str, msg: str, **attrs) -> None:
    now = datetime.now().astimezone()
    stamp = now.isoformat(timespec="milliseconds")
    stamp = stamp[:-6] + "Z" if stamp.endswith("+00:00") else stamp
    fields = "".join(f" {key}={_value(value)}" for key, value in attrs.items())
    sys.stderr.write(f"time={stamp} level={level} msg={_value(msg)}{fields}\n")
    sys.stderr.flush()


def _value(value) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' ="\n') else text
