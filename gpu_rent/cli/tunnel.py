"""The tunnel to SwarmUI and its watchdog: tunnel, watchdog, the hidden sentinel and open; and open_tunnel, the
background tunnel that up opens too."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpu_rent.cli.common import (
    ProjectOption,
    StopOnExitOption,
    WatchOption,
    fail,
    handled,
    load_settings,
    vm_target,
    watchdog,
)
from gpu_rent.cli.console import ExitCode, console, err, error, note
from gpu_rent.project import settings as config
from gpu_rent.project.state import Phase, StateStore
from gpu_rent.watch.decision import WATCH_SECONDS


def _say(message: str) -> None:
    """A timestamped line for the long-running tunnel and watchdog (their log file in the background)."""
    err.print(f"[dim]{datetime.now():%H:%M:%S}[/] {escape(message)}", soft_wrap=True)


def tunnel_command(
    project: ProjectOption = Path("."),
    background: Annotated[
        bool, typer.Option("--background", "-b", help="Run in the background (as up does) and return.")
    ] = False,
    close: Annotated[bool, typer.Option("--close", help="Close the background tunnel; the VM keeps running.")] = False,
    stop_on_exit: StopOnExitOption = False,
    watch_seconds: WatchOption = WATCH_SECONDS,
) -> None:
    """Forward http://127.0.0.1:LOCAL_PORT to SwarmUI on the VM, with the watchdog; Ctrl+C closes it.

    The watchdog brings a preempted (shelved) VM back with the same disks and reopens the tunnel;
    a server in ERROR ends it with the reason, never with a new rental. The VM is never stopped here.
    """
    if close and (background or stop_on_exit):  # one would be dropped without a word
        error(f"--close and {'--background' if background else '--stop-on-exit'} do not go together: give one of them")
        raise typer.Exit(ExitCode.BAD_INPUT)
    settings = load_settings(project)
    if close:
        closed = watchdog.close_background(settings)
        console.print(f"tunnel closed (pid {closed['pid']}); the VM keeps running" if closed else "no tunnel runs")
        return
    if background:
        open_tunnel(settings, watch_seconds, stop_on_exit=stop_on_exit)
        return
    running = watchdog.read_record(settings)
    if running is not None:
        note(f"a tunnel already runs: {running['url']} (pid {running['pid']}); `gpu-rent tunnel --close` closes it")
        return
    _run_session(settings, watch_seconds, forward=True, stop_on_exit=stop_on_exit)


def open_tunnel(
    settings: config.Settings,
    watch_seconds: float = WATCH_SECONDS,
    after_up: bool = False,
    stop_on_exit: bool = False,
) -> dict:
    """The project's background tunnel, started when none runs; exits with one line when it cannot."""
    record = watchdog.read_record(settings)
    if record is None:
        vm_target(settings)  # no VM yet is bad input, said here rather than by a child process
        try:
            record = watchdog.start_background(settings, watch_seconds, stop_on_exit=stop_on_exit)
        except watchdog.SessionEnded as e:
            error(f"{e} (the VM is ready: gpu-rent tunnel tries again)" if after_up else str(e))
            raise typer.Exit(ExitCode.BAD_INPUT if e.code == 2 else ExitCode.FAILED) from None
    else:  # a tunnel kept running through a re-up: the phase says so again
        store = StateStore(settings.project_dir)
        watchdog.move_phase(store, Phase.READY_TUNNELED, {Phase.READY_CLOUD}, "the tunnel forwards", note)
    if record.get("state") == "recovering":
        note(f"the watchdog is bringing the VM back ({record.get('message')}); the tunnel follows")
    console.print(
        f"[green]tunnel[/]: {record['url']} → SwarmUI on the VM (pid {record['pid']}; "
        "`gpu-rent tunnel --close` closes it, the VM keeps running)"
    )
    if record.get("llm_url"):
        console.print(f"[green]tunnel[/]: {record['llm_url']} → {settings.llm_runtime} on the VM (the same tunnel)")
    return record


def _run_session(settings: config.Settings, watch_seconds: float, forward: bool, stop_on_exit: bool = False) -> None:
    """The tunnel and/or watchdog in the foreground until Ctrl+C or its end; exits with its code."""
    try:
        code = watchdog.run_foreground(settings, _say, watch_seconds, forward=forward, stop_on_exit=stop_on_exit)
    except watchdog.SessionEnded as e:
        error(str(e))
        raise typer.Exit(e.code) from None
    except handled() as e:
        raise fail(e) from None
    raise typer.Exit(code)


def watchdog_command(project: ProjectOption = Path("."), watch_seconds: WatchOption = WATCH_SECONDS) -> None:
    """Watch the server without a tunnel: bring back a preempted VM, say why when it cannot. Ctrl+C ends it."""
    _run_session(load_settings(project), watch_seconds, forward=False)


def sentinel_command(
    pid: Annotated[int, typer.Option("--pid", help="The tunnel process to watch.")], project: ProjectOption = Path(".")
) -> None:
    """--stop-on-exit's watcher: stops the VM when the tunnel process PID dies without closing cleanly."""
    raise typer.Exit(watchdog.sentinel(load_settings(project), pid, _say))


def open_command(project: ProjectOption = Path(".")) -> None:
    """Open SwarmUI in the browser, opening the tunnel first when none runs."""
    import webbrowser

    from gpu_rent.util import wsl

    settings = load_settings(project)
    record = open_tunnel(settings)
    # In WSL the browser is Windows'; Python's webbrowser would look for one inside Linux
    if not (wsl.open_in_windows(record["url"]) or webbrowser.open(record["url"])):
        note(f"no browser found here: open {record['url']} yourself")
