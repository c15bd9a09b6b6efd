"""The commands that only look and change nothing: status (the cloud's word on the rental) and doctor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpu_rent.cli.common import ProjectOption, fail, handled, load_settings
from gpu_rent.cli.console import ExitCode, console, note
from gpu_rent.cloud import route as cloud_route
from gpu_rent.rental.report import doctor_checks, status_report


def status(
    project: ProjectOption = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Ask the cloud (never only the local state): phase, server, address, volumes, cost, leftovers."""
    # a configuration unchanged since a status read the cloud through openstacksdk is not checked by it again
    settings = load_settings(project, known_cloud=cloud_route.fits)
    try:
        report = status_report(settings, say=note)
    except handled() as e:
        raise fail(e) from None
    if as_json:
        console.print_json(json.dumps(report.to_json()))
        return
    report.render(console)


def doctor(project: ProjectOption = Path(".")) -> None:
    """Check auth, the catalog, flavors, image, network, quotas, the SSH key and the idle-killer's access rule
    (with a throw-away credential, deleted before it returns). Rents nothing."""
    settings = load_settings(project)
    try:
        checks = doctor_checks(settings)
    except handled() as e:
        raise fail(e) from None
    for check in checks:
        mark = "[green]ok[/]  " if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} {check.name}: {check.detail}")
    if not all(c.ok for c in checks):
        refused = any(c.name == "auth" and not c.ok for c in checks)
        raise typer.Exit(ExitCode.CLOUD_UNREACHABLE if refused else ExitCode.FAILED)
