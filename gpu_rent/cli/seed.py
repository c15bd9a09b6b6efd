"""The seed commands: what seed.yml and ollama-models.yaml list, brought onto the running VM by the playbooks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpu_rent.cli.common import ProjectOption, fail, handled, load_settings, rental_for, tells_when_long, watchdog
from gpu_rent.cli.console import console, note
from gpu_rent.project import llm_models


def _seed(part: str, project: Path, update: bool = False) -> None:
    settings = load_settings(project)
    if not settings.seed[part]:
        console.print(f"seed.yml lists no {part}: nothing to do")
        return
    try:
        rental_for(settings).seed(part, update)
    except handled() as e:
        raise fail(e) from None
    count = len(settings.seed[part])
    console.print(f"[green]seeded[/] {part}: {count} entr{'y' if count == 1 else 'ies'} of seed.yml in place")


@tells_when_long("seed-extensions")
def seed_extensions(
    project: ProjectOption = Path("."),
    update: Annotated[
        bool, typer.Option("--update", help="Fetch every extension again, also when seed.yml did not change.")
    ] = False,
) -> None:
    """Clone the extensions listed in seed.yml; SwarmUI rebuilds and restarts only when one changed."""
    _seed("extensions", project, update)


@tells_when_long("seed-models")
def seed_models(project: ProjectOption = Path(".")) -> None:
    """Download the models listed in seed.yml, checking each sha256; an interrupted download resumes."""
    _seed("models", project)


@tells_when_long("seed-autocomplete")
def seed_autocomplete(project: ProjectOption = Path(".")) -> None:
    """Download the autocomplete lists listed in seed.yml."""
    _seed("autocomplete", project)


@tells_when_long("seed-llm")
def seed_llm(project: ProjectOption = Path(".")) -> None:
    """Install the LLM runtime (LLM_RUNTIME=ollama or llamacpp) on the running VM and bring ollama-models.yaml's models.

    A model already there is not downloaded again; an interrupted download resumes.
    """
    settings = load_settings(project)
    try:
        rental_for(settings).seed_llm()
    except handled() as e:
        raise fail(e) from None
    count = len(settings.llm_models)
    runtime = llm_models.NAMES[settings.llm_runtime]
    console.print(f"[green]seeded[/] the LLM runtime: {runtime} and {count} model{'' if count == 1 else 's'} in place")
    running = watchdog.read_record(settings)
    if running is not None and running.get("llm_url"):
        console.print(f"[green]tunnel[/]: {running['llm_url']} → {runtime} on the VM")
    elif running is not None:  # opened while LLM_RUNTIME was none: it forwards SwarmUI's port alone
        note(
            f"the running tunnel forwards no LLM port: `gpu-rent tunnel --close`, then `gpu-rent tunnel --background` "
            f"adds http://127.0.0.1:{settings.llm_local_port}"
        )
