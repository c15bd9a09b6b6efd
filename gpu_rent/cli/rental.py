"""The commands that rent, change and give back the VM through the playbooks: up, stop, hold, resize-data, destroy,
and dry-run, which shows what up would rent."""

from __future__ import annotations

import sys
import time
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
    files,
    handled,
    load_settings,
    notifier,
    rental_for,
    sync,
    tells_when_long,
    vm_ssh,
    watchdog,
)
from gpu_rent.cli.console import ExitCode, console, error, note, transfer_progress
from gpu_rent.cli.tunnel import open_tunnel
from gpu_rent.cloud import view as cloud
from gpu_rent.cloud.connect import ScopeElsewhere, connect
from gpu_rent.project import settings as config
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.state import StateStore, load_state
from gpu_rent.rental.hold import hold_until
from gpu_rent.rental.operations import OperationFailed
from gpu_rent.rental.plan import PlanItem, plan
from gpu_rent.to_vm import killer_view
from gpu_rent.watch.decision import WATCH_SECONDS

# up reads the idle-killer's status once it has looked, beside the rest of the run; older than this, read again
KILLER_READ_FRESH_SECONDS = 20


def up(
    project: ProjectOption = Path("."),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Rent without asking.")] = False,
    tunnel: Annotated[
        bool, typer.Option("--tunnel/--no-tunnel", help="Open the tunnel (with its watchdog) in the background.")
    ] = True,
    stop_on_exit: StopOnExitOption = False,
    watch_seconds: WatchOption = WATCH_SECONDS,
    full: Annotated[
        bool,
        typer.Option(
            "--full", help="Redo every step on the VM, even those whose stamp says they are done and in place."
        ),
    ] = False,
) -> None:
    """Rent the VM (or reuse the running one), bring SwarmUI up and open the tunnel to it.

    Before renting it says what it will rent and the most it costs per hour, and asks.
    """
    settings = load_settings(project)

    def confirm(items: list[PlanItem]) -> bool:
        _print_plan(items)
        if yes:
            return True
        if not sys.stdin.isatty():
            raise ConfigError("arguments", "up would rent a server: confirm with --yes (no terminal to ask on)")
        return typer.confirm("Rent it?", default=False)

    rental = rental_for(settings)
    reading: list = []  # the killer's status, read from the VM while the rest of up runs, and when

    def read_killer(resources: dict) -> None:
        if not reading:
            address, boot = resources.get("floating_ip_address"), resources.get("boot_volume")
            reading.extend((killer_view.start_for(settings, address, boot), time.monotonic()))

    rental.killer_looked = read_killer
    try:
        state, result = rental.up(confirm, {"vm_stamp_redo": True} if full else None)
    except handled() as e:
        if reading:
            killer_view.abandon(reading[0])
        if not (isinstance(e, OperationFailed) and e.canceled):
            notifier.notify("gpu-rent up failed", str(e).splitlines()[-1][:200] if str(e) else type(e).__name__)
        raise fail(e) from None
    cloud_changed = result.changed.get("localhost", 0)
    vm_changed = sum(n for host, n in result.changed.items() if host != "localhost")
    r = state.resources
    console.print(
        f"[green]ready[/]: {settings.name} ({state.flavor} in {state.pool}) at {r.get('floating_ip_address')}, "
        f"SwarmUI on the VM's 127.0.0.1:{settings.remote_port}; changed: cloud {cloud_changed}, VM {vm_changed}"
    )
    if state.gpu:
        note(f"GPU: {state.gpu}")
    # the killer's own word, read from the VM (from its first look on): armed (and what keeps the VM), or blind
    # a read older than a few seconds (a first up installs for minutes after the arm) is read again
    fresh = bool(reading) and time.monotonic() - reading[1] < KILLER_READ_FRESH_SECONDS
    if reading and not fresh:
        killer_view.abandon(reading[0])
    address = r.get("floating_ip_address") or ""
    seen = killer_view.finish(reading[0]) if fresh else killer_view.ask(settings, r, address)
    said = killer_view.describe(seen, time.time(), r.get("server"))
    note(f"idle-killer: {said}; `gpu-rent hold` keeps the VM longer")
    if tunnel:
        open_tunnel(settings, watch_seconds, after_up=True, stop_on_exit=stop_on_exit)
    notifier.notify("gpu-rent: SwarmUI is ready", watchdog.url(settings) if tunnel else f"{settings.name} is ready")


@tells_when_long("stop")
def stop(
    project: ProjectOption = Path("."),
    no_pull: Annotated[bool, typer.Option("--no-pull", help="Do not copy new outputs to ./Output first.")] = False,
) -> None:
    """Delete the VM and its floating IP; the boot and data volumes stay for the next up.

    With PULL_OUTPUT (the default) new outputs are copied to ./Output first, when the VM answers.
    """
    settings = load_settings(project)
    _wait_for_the_lock(settings, "stop")
    if settings.pull_output and not no_pull:
        _pull_before_stop(settings)
    closed = watchdog.close_background(settings)  # this project's tunnel first: its watchdog must not act
    if closed:
        note(f"tunnel closed (pid {closed['pid']})")
    try:
        state = rental_for(settings).stop()
    except handled() as e:
        raise fail(e) from None
    kept = ", ".join(f"{k} {v}" for k, v in state.resources.items() if k in ("boot_volume", "data_volume"))
    console.print(f"[green]stopped[/]: no server is billing; kept {kept or 'no volumes'}")


def _wait_for_the_lock(settings: config.Settings, command: str) -> None:
    """Refuse at once, touching nothing (not even the tunnel), when another command holds the project."""
    try:
        with StateStore(settings.project_dir).lock(command):
            pass
    except handled() as e:
        raise fail(e) from None


def _pull_before_stop(settings: config.Settings) -> None:
    """Step 1 of stop: new outputs to ./Output when a VM runs and SSH answers; never a reason not to stop."""
    try:
        state = load_state(StateStore(settings.project_dir), note)
        conn = connect(settings)
        name = config.resource_names(settings.name)["server"]
        server = cloud.observe_servers(conn, settings.name).server(name, state.resources.get("server"))
        if server is None or server.status != "ACTIVE":
            return
        if not (state.resources.get("floating_ip_address") and state.resources.get("boot_volume")):
            # the state lost where the VM is (moved aside as corrupt, or a copy of the folder): the cloud knows
            state.resources.update(cloud.proven_resources(state, cloud.observe(conn, settings.name), settings.name))
        target = vm_ssh.Target.of(settings, state.resources)
        with transfer_progress("pulling Output") as show:
            result = files.pull_output(settings, target, False, show)
    except (vm_ssh.SshError, sync.SyncError) as e:
        note(f"outputs not pulled ({e}); stopping anyway")
        return
    except ScopeElsewhere as e:  # before the tunnel closes: a stop refused must leave the project as it was
        raise fail(e) from None
    except handled():
        return  # the stop itself says what is wrong with the cloud
    if result.files_sent:
        console.print(f"pulled to {files.output_dir(settings)}: {files.summary(result)}")


def hold(
    project: ProjectOption = Path("."),
    minutes: Annotated[
        int | None, typer.Option("--minutes", help="Hold for this many minutes from now (replaces an earlier hold).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Hold until this ISO time, e.g. 2026-11-29T21:30 (local time).")
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the hold.")] = False,
) -> None:
    """Keep the idle-killer away until a time: without options, for IDLE_MINUTES from now.

    For work SwarmUI cannot show as busy, e.g. a download started in the UI.
    """
    settings = load_settings(project)
    try:
        end = hold_until(time.time(), settings.idle_minutes, minutes, until, clear)
        rental_for(settings).hold(end)
    except handled() as e:
        raise fail(e) from None
    if end is None:
        console.print("[green]hold cleared[/]: the idle-killer counts as usual")
    else:
        console.print(f"[green]held[/] until {datetime.fromtimestamp(end).astimezone():%Y-%m-%d %H:%M %Z}")


@tells_when_long("resize-data")
def resize_data(
    gb: Annotated[int, typer.Option("--gb", min=1, help="New size of the data volume in GiB; it only grows.")],
    project: ProjectOption = Path("."),
) -> None:
    """Grow the data volume (models, outputs) and its filesystem; the data stays.

    Online while the VM runs where the cloud allows it; otherwise the filesystem grows at the next up.
    Shrinking is refused: volumes only grow.
    """
    settings = load_settings(project)
    try:
        _, before = rental_for(settings).resize_data(gb)
    except handled() as e:
        raise fail(e) from None
    if before == gb:
        console.print(f"the data volume is already {gb} GB: nothing to do")
        return
    console.print(f"[green]grown[/]: the data volume is {gb} GB (was {before} GB)")
    if settings.data_volume_gb != gb:
        note(f"set DATA_VOLUME_GB={gb} in gpu-rent.vars to keep the settings in step")


@tells_when_long("destroy")
def destroy(
    project: ProjectOption = Path("."),
    i_understand_data_loss: Annotated[
        bool,
        typer.Option("--i-understand-data-loss", help="Required: the volumes (models, outputs, settings) are deleted."),
    ] = False,
    no_pull: Annotated[bool, typer.Option("--no-pull", help="Do not copy new outputs to ./Output first.")] = False,
) -> None:
    """Delete everything: the VM, the floating IP, both volumes, the network. Only with --i-understand-data-loss."""
    settings = load_settings(project)
    if not i_understand_data_loss:
        error(
            "destroy deletes the boot and data volumes (every model, output and setting): pass --i-understand-data-loss"
        )
        raise typer.Exit(ExitCode.BAD_INPUT)
    _wait_for_the_lock(settings, "destroy")
    if settings.pull_output and not no_pull:
        _pull_before_stop(settings)  # the data volume goes: the outputs not yet home would go with it
    watchdog.close_background(settings)
    try:
        rental_for(settings).destroy()
    except handled() as e:
        raise fail(e) from None
    console.print("[green]destroyed[/]: nothing of this project is left in the cloud")


def dry_run(project: ProjectOption = Path(".")) -> None:
    """Show what `up` would create or reuse, without changing anything."""
    settings = load_settings(project)
    try:
        conn = connect(settings)
        view = cloud.observe(conn, settings.name)
        items = plan(settings, view, conn)
    except handled() as e:
        raise fail(e) from None
    _print_plan(items)
    try:
        state = load_state(StateStore(settings.project_dir), note)
    except handled() as e:
        raise fail(e) from None
    console.print(f"[dim]phase now: {state.phase}[/]")


def _print_plan(items: list[PlanItem]) -> None:
    """One line per resource, never cropped: the price must reach the user whatever the terminal width."""
    what = max(len(i.what) for i in items)
    name = max(len(i.name) for i in items)
    for item in items:
        style = "bold yellow" if item.action == "create" else "dim"
        columns = f"{escape(item.what):<{what}}  {escape(item.name):<{name}}  {escape(item.detail)}"
        console.print(f"[{style}]{item.action:<6}[/] {columns}".rstrip())
