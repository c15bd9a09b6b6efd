"""Whether a process still lives, on POSIX and on Windows (the tunnel's record and the runner's auth files ask)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if os.name == "nt":  # os.kill(pid, 0) would end the process on Windows
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        code = ctypes.c_ulong()
        still_active = 259
        got = bool(handle) and ctypes.windll.kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        alive = got and code.value == still_active
        if handle:
            ctypes.windll.kernel32.CloseHandle(handle)
        return bool(alive)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True
