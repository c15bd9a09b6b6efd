"""gpu-rent: rent a preemptible OpenStack GPU VM for SwarmUI that deletes itself when idle.

Exit codes: 0 done; 1 a cloud or playbook step failed (the message names it);
2 bad input (configuration, arguments, missing key, refused without its flag);
3 another gpu-rent command is running in this project; 4 the cloud did not
answer or refused the credentials; 130 canceled with Ctrl+C.

The Typer app and the one list of its commands, in the order --help shows them. Each command lives in the module
of its group (setup, rental, status, seed, tunnel, vm); none of them imports this one, so the split has no
cycle.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from gpu_rent import __version__
from gpu_rent.cli import rental, seed, setup, status, tunnel, vm
from gpu_rent.cli.console import ExitCode, console, err, error

# the Click that Typer runs on: its own copy (typer._click) in newer Typer, the click package in older ones
_click_errors = sys.modules[typer.BadParameter.__module__]

app = typer.Typer(
    name="gpu-rent",
    help=__doc__.split("\n\n")[0],
    epilog=__doc__.split("\n\n")[1].replace("\n", " "),
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        console.print(f"gpu-rent {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Rent a preemptible OpenStack GPU VM for SwarmUI; it deletes itself when idle, the disks stay."""
    try:  # a shell left in a deleted folder: every path (and openstacksdk's config search) starts from it
        os.getcwd()
    except FileNotFoundError:
        if not {"--help", "-h"} & set(sys.argv[1:]):  # help reads no folder
            error("the current folder no longer exists (deleted or moved): cd into one that does")
            raise typer.Exit(ExitCode.BAD_INPUT) from None


# --help lists the commands in the order they are registered: this list is that order
app.command()(setup.setup)
app.command()(rental.up)
app.command()(rental.stop)
app.command("seed-extensions")(seed.seed_extensions)
app.command("seed-models")(seed.seed_models)
app.command("seed-autocomplete")(seed.seed_autocomplete)
app.command("seed-llm")(seed.seed_llm)
app.command()(rental.hold)
app.command("resize-data")(rental.resize_data)
app.command()(rental.destroy)
app.command()(status.status)
app.command("tunnel")(tunnel.tunnel_command)
app.command("watchdog")(tunnel.watchdog_command)
app.command("sentinel", hidden=True)(tunnel.sentinel_command)
app.command("open")(tunnel.open_command)
app.command()(vm.push)
app.command("pull-output")(vm.pull_output)
app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(vm.ssh_command)
app.command()(vm.logs)
app.command()(status.doctor)
app.command("dry-run")(rental.dry_run)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except _click_errors.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # the help is already printed
            sys.exit(e.exit_code)
        # a usage mistake (an unknown option, --gb 0) is one line like every other, not Click's panel
        usage = isinstance(e, _click_errors.UsageError)
        ctx = getattr(e, "ctx", None)
        error(e.format_message().rstrip(".") + (f" (see {ctx.command_path} --help)" if usage and ctx else ""))
        sys.exit(ExitCode.BAD_INPUT if usage else e.exit_code)
    except typer.Abort:  # Ctrl+C or Ctrl+D at a question: nothing was asked of the cloud
        err.print("canceled")
        sys.exit(ExitCode.CANCELED)
    except KeyboardInterrupt:
        err.print("canceled")
        sys.exit(ExitCode.CANCELED)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)
