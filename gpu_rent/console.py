"""One console, one way to say things: errors as one line, progress as a live line."""

from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from gpu_rent.runner import Progress

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class ExitCode:
    OK = 0
    FAILED = 1  # the cloud or a playbook step failed; the message names it
    BAD_INPUT = 2  # configuration, arguments, a missing key, a refusal without its flag
    BUSY = 3  # another gpu-rent command holds this project's lock
    CLOUD_UNREACHABLE = 4  # Keystone did not answer or refused the credentials
    CANCELED = 130  # Ctrl+C


def error(message: str) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def note(message: str) -> None:
    err.print(f"[dim]{escape(message)}[/]", soft_wrap=True)


@contextmanager
def playbook_progress(title: str):
    """A live line: phase, current task, host, elapsed; fed by runner events."""
    started = time.monotonic()
    status = Status(f"{title}: starting", console=err, spinner="dots")
    state = {"task": "starting", "host": None, "task_started": started}

    def show(progress: Progress) -> None:
        state.update(task=progress.task, host=progress.host, task_started=progress.started)
        where = f" on {progress.host}" if progress.host else ""
        status.update(
            f"{escape(title)}: {escape(progress.task)}{escape(where)} [dim]({time.monotonic() - started:.0f}s)[/]"
        )
        # without a terminal, one line per task (not per host), and not Ansible's own argument checks
        if not err.is_terminal and progress.host is None and not progress.task.startswith("Validating arguments"):
            err.print(f"[dim]{escape(title)}: {escape(progress.task)}[/]")

    if err.is_terminal:
        status.start()
    try:
        yield show
    finally:
        if err.is_terminal:
            status.stop()
