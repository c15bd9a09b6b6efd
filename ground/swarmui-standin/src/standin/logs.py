"""SwarmUI's console log lines (src/Utils/Logs.cs LogWithColor): `HH:mm:ss.fff [Level] message`.

`log` is what the stand-in's modules are given: `log(level, message)` (as extensions.py calls it)
or its level methods. Debug and Verbose lines are dropped, as at upstream's default LogLevel (Info).
"""

import sys
import threading
import time

_lock = threading.Lock()


def _write(level: str, message: str) -> None:
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    with _lock:
        sys.stdout.write(f"{stamp} [{level}] {message}\n")
        sys.stdout.flush()


class Logs:
    def __call__(self, level: str, message: str) -> None:
        if level not in ("Debug", "Verbose"):
            _write(level, message)

    def info(self, message: str) -> None:
        _write("Info", message)

    def init(self, message: str) -> None:
        _write("Init", message)

    def warning(self, message: str) -> None:
        _write("Warning", message)

    def error(self, message: str) -> None:
        _write("Error", message)

    def debug(self, message: str) -> None:
        pass

    def critical_load_error(self, message: str) -> None:
        """Logs.CriticalLoadError: the message between two `!!!!` error lines, then a 2 s pause."""
        _write("Error", "!!!!")
        _write("Error", message)
        _write("Error", "!!!!")
        time.sleep(2)


log = Logs()
