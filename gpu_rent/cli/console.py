"""One console, one way to say things: errors as one line, progress as live bars."""

from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from gpu_rent.rental.runner import Progress as RunnerProgress

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


def _amount(done: int, total: int | None) -> str:
    """Bytes read as sizes once they are large (model downloads); small counts stay counts."""
    if max(done, total or 0) < 1_000_000:
        return f"{done}/{total}" if total is not None else str(done)
    unit, scale = ("GB", 1e9) if max(done, total or 0) >= 1e9 else ("MB", 1e6)
    return f"{done / scale:.1f}/{total / scale:.1f} {unit}" if total is not None else f"{done / scale:.1f} {unit}"


@contextmanager
def _live(bars: Progress):
    """Draw the bars only on a terminal; elsewhere the callers print plain lines."""
    if err.is_terminal:
        bars.start()
    try:
        yield
    finally:
        if err.is_terminal:
            bars.stop()


@contextmanager
def playbook_progress(title: str):
    """Live progress fed by runner events: the current task, host and elapsed time, and a bar per stage
    of a long remote step (its `::gpu-rent-progress` lines)."""
    started = time.monotonic()
    bars = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=30),
        TextColumn("{task.fields[amount]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    main = bars.add_task(f"{escape(title)}: starting", total=None, amount="")
    stages: dict[str, TaskID] = {}
    printed: dict[str, int] = {}

    def show(progress: RunnerProgress) -> None:
        line = progress.line
        if line is not None:
            stage = line.stage or progress.task
            if stage not in stages:
                stages[stage] = bars.add_task(escape(stage), total=line.total, amount="")
            bars.update(stages[stage], completed=line.done, total=line.total, amount=_amount(line.done, line.total))
            # without a terminal, a line per tenth of the way (or per new stage), not one per poll
            tenth = int(10 * line.done / line.total) if line.total else -1
            if not err.is_terminal and printed.get(stage) != tenth:
                printed[stage] = tenth
                err.print(f"[dim]{escape(title)}: {escape(stage)} {_amount(line.done, line.total)}[/]")
            return
        where = f" on {progress.host}" if progress.host else ""
        bars.update(main, description=f"{escape(title)}: {escape(progress.task)}{escape(where)}")
        # without a terminal, one line per task (not per host), and not Ansible's own argument checks
        if not err.is_terminal and progress.host is None and not progress.task.startswith("Validating arguments"):
            err.print(f"[dim]{escape(title)}: {escape(progress.task)} ({time.monotonic() - started:.0f}s)[/]")

    with _live(bars):
        yield show


@contextmanager
def transfer_progress(title: str):
    """A byte bar for push and pull: `show(done, total, name)`; without a terminal, a line per tenth."""
    from rich.progress import DownloadColumn, TransferSpeedColumn

    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=30),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    task = bars.add_task(escape(title), total=None)
    printed = [-1]

    def show(done: int, total: int, name: str) -> None:
        bars.update(task, completed=done, total=total or None, description=f"{escape(title)} {escape(name[-40:])}")
        tenth = int(10 * done / total) if total else 0
        if not err.is_terminal and total and tenth != printed[0]:
            printed[0] = tenth
            err.print(f"[dim]{escape(title)}: {_amount(done, total)}[/]")

    with _live(bars):
        yield show
