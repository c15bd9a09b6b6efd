"""`gpu-rent setup`: its options, the questions on a terminal, and what it says once the project is written."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpu_rent.cli.common import ProjectOption, fail, handled
from gpu_rent.cli.console import ExitCode, console, err, error, note
from gpu_rent.cli.status import doctor
from gpu_rent.project.env import DEFAULT_SSH_KEY
from gpu_rent.util.lazy import lazy

# only `setup` asks and logs in: every other command starts without them (~25 ms of `status`)
setup_login = lazy("gpu_rent.setup.login")
setup_prompts = lazy("gpu_rent.setup.prompts")
setup_wizard = lazy("gpu_rent.setup.wizard")


def setup(
    project: ProjectOption = Path("."),
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Take every answer from the options; ask nothing.")
    ] = False,
    cloud_name: Annotated[
        str | None, typer.Option("--cloud", help="The clouds.yaml entry to use (written to .env as OS_CLOUD).")
    ] = None,
    clouds_yaml: Annotated[
        Path | None,
        typer.Option(
            "--clouds-yaml",
            envvar="OS_CLIENT_CONFIG_FILE",
            help="The clouds.yaml that defines --cloud.",
            show_default="the usual places openstack looks",
        ),
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Availability zone to rent in (POOL).")] = None,
    flavor: Annotated[str | None, typer.Option("--flavor", help="GPU flavor, by name or id (FLAVOR).")] = None,
    image: Annotated[str | None, typer.Option("--image", help="Boot image, by name or id (IMAGE).")] = None,
    key: Annotated[
        Path | None,
        typer.Option("--key", help="SSH private key for the VM (GPU_RENT_SSH_KEY).", show_default=DEFAULT_SSH_KEY),
    ] = None,
    new_key: Annotated[
        bool, typer.Option("--new-key", help="Make an ed25519 key (in the project folder unless --key says where).")
    ] = False,
    auth_url: Annotated[
        str | None,
        typer.Option("--auth-url", help="Keystone URL, for typed OS_* values instead of --cloud (OS_AUTH_URL)."),
    ] = None,
    username: Annotated[
        str | None,
        typer.Option("--username", help="User to log in as (OS_USERNAME); the password is read from OS_PASSWORD."),
    ] = None,
    project_name: Annotated[str | None, typer.Option("--project-name", help="Project (OS_PROJECT_NAME).")] = None,
    user_domain: Annotated[
        str | None,
        typer.Option("--user-domain", help="The user's domain (OS_USER_DOMAIN_NAME).", show_default="Default"),
    ] = None,
    project_domain: Annotated[
        str | None,
        typer.Option("--project-domain", help="The project's domain (OS_PROJECT_DOMAIN_NAME).", show_default="Default"),
    ] = None,
    region: Annotated[
        str | None,
        typer.Option("--region", help="Region (OS_REGION_NAME).", show_default="the catalog's only region"),
    ] = None,
    credential_id: Annotated[
        str | None,
        typer.Option(
            "--application-credential-id",
            help="Log in with an application credential (its secret read from OS_APPLICATION_CREDENTIAL_SECRET).",
        ),
    ] = None,
    price: Annotated[
        str | None,
        typer.Option("--price-per-hour", help='Price of the flavor per hour (PRICE_PER_HOUR); "" unsets it.'),
    ] = None,
    flavor_fallback: Annotated[
        list[str] | None,
        typer.Option(
            "--flavor-fallback", help='A GPU flavor to try when FLAVOR has no capacity, repeatable; "" for none.'
        ),
    ] = None,
    operator_cidr: Annotated[
        str | None,
        typer.Option(
            "--operator-cidr",
            help="Your public address (or network) for SSH to the VM (OPERATOR_CIDR); needed when auto cannot find "
            "it: this machine reaches the cloud from a private address (NAT).",
            show_default="auto, or the project's",
        ),
    ] = None,
    key_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help='Any other key of gpu-rent.vars, e.g. --set DATA_VOLUME_GB=200; repeatable; "KEY=" puts it back '
            "to its default.",
        ),
    ] = None,
    llm_runtime: Annotated[
        str | None,
        typer.Option(
            "--llm-runtime",
            metavar="[none|ollama|llamacpp]",
            help="An LLM runtime beside SwarmUI on the VM's GPU (LLM_RUNTIME): Ollama or llama.cpp's llama-server.",
            show_default="the project's, or none",
        ),
    ] = None,
) -> None:
    """Make a project folder: check the login, pool, GPU flavor, image and SSH key, then write .env and gpu-rent.vars.

    On a terminal it asks, offering what the cloud has (the options and the project's values are the defaults).
    Nothing is written until every check passed. A re-run keeps the values it is not given. Then it runs doctor.
    The login is a clouds.yaml entry (--cloud) or typed OS_* values (--auth-url ...); a password or secret is read
    from the environment only, never from an option: the command line is visible to every user of the machine.
    When OPERATOR_CIDR=auto cannot find this machine's public address (it reaches the cloud from a private one,
    behind NAT), the address SSH to the VM is open to is asked for, or given with --operator-cidr.
    Last, the LLM runtime (--llm-runtime); with ollama or llamacpp, a project without an ollama-models.yaml gets a
    starter one that lists no model.
    """
    # the secrets from the environment: argv is visible in ps, the environment is not
    login = setup_login.Login(
        auth_url=auth_url,
        username=username,
        password=os.environ.get("OS_PASSWORD") or None,
        project_name=project_name,
        user_domain=user_domain,
        project_domain=project_domain,
        region=region,
        credential_id=credential_id,
        credential_secret=os.environ.get("OS_APPLICATION_CREDENTIAL_SECRET") or None,
    )
    given = setup_wizard.Answers(
        project=project,
        cloud=cloud_name,
        clouds_yaml=clouds_yaml,
        pool=pool,
        flavor=flavor,
        image=image,
        key=key,
        new_key=new_key,
        login=login,
        price=price,
        flavor_fallback=None if flavor_fallback is None else tuple(flavor_fallback),
        operator_cidr=operator_cidr,
        settings=tuple(key_values or ()),
        llm_runtime=llm_runtime,
    )
    if not non_interactive and not sys.stdin.isatty():
        error("no terminal to ask on: use gpu-rent setup --non-interactive --cloud NAME --pool P --flavor F --image I")
        raise typer.Exit(ExitCode.BAD_INPUT)
    try:
        if non_interactive:
            checked, written = setup_wizard.run(given, _setup_warning)
        else:
            checked = _ask_setup(given)
            written = setup_wizard.write(checked)
    except handled() as e:
        raise fail(e) from None
    a = checked.answers
    who = a.cloud if a.cloud else checked.auth.describe()
    checks = f"{who}, pool {a.pool}, {checked.flavor.describe()}, image {a.image}"
    if a.operator_cidr:
        checks += f", SSH from {a.operator_cidr}"
    console.print(f"[green]checked[/]: {escape(checks)}")
    if a.new_key and checked.key_to_make is None:
        note(f"new key: {a.key} is there already; kept, not replaced")
    console.print(f"wrote {escape(', '.join(str(p) for p in written))}")
    doctor(a.project)
    console.print(f"next: {escape(f'gpu-rent up --project {shlex.quote(str(a.project))}')}")


def _setup_warning(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _ask_setup(given: setup_wizard.Answers) -> setup_wizard.Checked:
    try:
        return setup_prompts.ask(given, setup_prompts.Prompter(console, err))
    except (KeyboardInterrupt, EOFError):
        console.print()  # the prompt's line was left open
        note("canceled: nothing written")
        raise typer.Exit(ExitCode.CANCELED) from None
