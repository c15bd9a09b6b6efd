"""What every command shares: the project option, the settings, one line and an exit code for a failure, the
notification at the end of a long command, and the modules more than one command loads on first use."""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from gpu_rent.cli.console import ExitCode, error, note, playbook_progress
from gpu_rent.cloud.connect import CloudUnreachable
from gpu_rent.project import settings as config
from gpu_rent.project.env import KnownCloud
from gpu_rent.project.errors import ConfigError, masked
from gpu_rent.project.state import StateError, StateLocked, StateStore, load_state
from gpu_rent.rental.operations import OperationFailed, Rental
from gpu_rent.util.lazy import lazy

# SSH, the tunnel and transfers load when a command uses them: status and doctor start without them.
files = lazy("gpu_rent.to_vm.files")
sync = lazy("gpu_rent.to_vm.sync")
vm_ssh = lazy("gpu_rent.to_vm.ssh")
watchdog = lazy("gpu_rent.watch.watchdog")
notifier = lazy("gpu_rent.util.notify")  # the desktop, at the end of up and of a long command

# keystoneauth warns on stderr on its own ("Failed to discover available identity versions ...") before the
# failure that the command then reports in its one line: the user gets that line only.
logging.getLogger("keystoneauth").addHandler(logging.NullHandler())
logging.getLogger("keystoneauth").propagate = False

ProjectOption = Annotated[
    Path,
    typer.Option(
        "--project",
        "-p",
        envvar="GPU_RENT_PROJECT",
        help="Project folder with .env and gpu-rent.vars.",
        show_default="the current folder",
    ),
]
StopOnExitOption = Annotated[
    bool,
    typer.Option(
        "--stop-on-exit", help="Stop the VM should the tunnel process die uncleanly (a crash, kill -9); not on Ctrl+C."
    ),
]
WatchOption = Annotated[
    float,
    typer.Option("--watch-seconds", min=0.5, hidden=True, help="Seconds between the watchdog's looks at the server."),
]

# a command that ran this long ends with a desktop notification (SPEC §11): its user has looked away by then;
# a shorter one is watched to its end, and a notification would only be noise
LONG_SECONDS = 30.0
_clock = time.monotonic  # how long a command ran (the tests set it)


def load_settings(project: Path, known_cloud: KnownCloud | None = None) -> config.Settings:
    try:
        return config.load(project, known_cloud=known_cloud)
    except ConfigError as e:
        error(str(e))
        raise typer.Exit(ExitCode.BAD_INPUT) from None


def fail(e: Exception) -> typer.Exit:
    """One line for the user, and the exit code that goes with the kind of failure."""
    if isinstance(e, ConfigError):
        error(str(e))
        return typer.Exit(ExitCode.BAD_INPUT)
    if isinstance(e, StateLocked):
        error(str(e))
        return typer.Exit(ExitCode.BUSY)
    if isinstance(e, CloudUnreachable):
        error(str(e))
        return typer.Exit(ExitCode.CLOUD_UNREACHABLE)
    if isinstance(e, cloud_errors()):
        error(f"the cloud refused or failed a request: {masked(' '.join(str(e).split()))[:400]}")
        return typer.Exit(ExitCode.CLOUD_UNREACHABLE)
    if isinstance(e, OperationFailed):
        if e.canceled:
            note(str(e))
            return typer.Exit(ExitCode.CANCELED)
        error(str(e))
        return typer.Exit(ExitCode.FAILED)
    error(str(e))
    return typer.Exit(ExitCode.FAILED)


def cloud_errors() -> tuple[type[Exception], ...]:
    """What the cloud or keystoneauth raise after a successful login: one line, never a traceback.

    Only of the libraries this process loaded: one never imported raised nothing, and importing openstacksdk for
    its exception classes alone would cost a command that never needs it a third of a second.
    """
    loaded = (("openstack.exceptions", "SDKException"), ("keystoneauth1.exceptions", "ClientException"))
    found = (getattr(sys.modules.get(module), name, None) for module, name in loaded)
    return tuple(error for error in found if error is not None)


def handled() -> tuple[type[Exception], ...]:
    """The failures a command reports in one line and an exit code (fail), not with a traceback."""
    return (ConfigError, StateError, CloudUnreachable, OperationFailed, *cloud_errors(), OSError)


def tells_when_long(what: str) -> Callable:
    """The command notifies at its end, done or failed, when it ran LONG_SECONDS or more; never when canceled."""

    def wrap(command: Callable) -> Callable:
        @functools.wraps(command)  # Typer reads the options from the signature, which wraps keeps
        def run(*args, **kwargs):
            start = _clock()
            try:
                command(*args, **kwargs)
            except typer.Exit as e:
                if e.exit_code not in (ExitCode.OK, ExitCode.CANCELED) and _clock() - start >= LONG_SECONDS:
                    notifier.notify(f"gpu-rent {what} failed", "the terminal says why")
                raise
            if _clock() - start >= LONG_SECONDS:
                project = Path(kwargs.get("project") or ".").resolve().name
                notifier.notify(f"gpu-rent {what} done", f"project {project}")

        return run

    return wrap


def rental_for(settings: config.Settings) -> Rental:
    return Rental(settings, say=note, progress=playbook_progress)


def vm_target(settings: config.Settings) -> vm_ssh.Target:
    try:
        state = load_state(StateStore(settings.project_dir), note)
    except handled() as e:
        raise fail(e) from None
    try:
        return vm_ssh.Target.of(settings, state.resources)
    except vm_ssh.SshError as e:
        error(str(e))
        raise typer.Exit(ExitCode.BAD_INPUT) from None
