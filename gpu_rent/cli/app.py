"""gpu-rent: rent a preemptible OpenStack GPU VM for SwarmUI that deletes itself when idle.

Exit codes: 0 done; 1 a cloud or playbook step failed (the message names it);
2 bad input (configuration, arguments, missing key, refused without its flag);
3 another gpu-rent command is running in this project; 4 the cloud did not
answer or refused the credentials; 130 canceled with Ctrl+C.

One file of ~900 lines on purpose: it is the Typer app, one thin function per command over rental, setup,
watchdog and report, sharing their options, the mapping of errors to exit codes and the output helpers;
split, the commands and those helpers would import each other both ways.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpu_rent import __version__
from gpu_rent.cli.console import ExitCode, console, err, error, note, playbook_progress, transfer_progress
from gpu_rent.cloud import route as cloud_route
from gpu_rent.cloud import view as cloud
from gpu_rent.cloud.connect import CloudUnreachable, connect
from gpu_rent.project import llm_models
from gpu_rent.project import settings as config
from gpu_rent.project.env import DEFAULT_SSH_KEY, KnownCloud
from gpu_rent.project.errors import ConfigError, masked
from gpu_rent.project.state import Phase, StateError, StateLocked, StateStore, load_state
from gpu_rent.rental.hold import hold_until
from gpu_rent.rental.operations import OperationFailed, Rental
from gpu_rent.rental.plan import PlanItem, plan
from gpu_rent.rental.report import doctor_checks, status_report
from gpu_rent.to_vm import killer_view
from gpu_rent.util.lazy import lazy
from gpu_rent.watch.decision import WATCH_SECONDS

# SSH, the tunnel and transfers load when a command uses them: status and doctor start without them.
asyncssh = lazy("asyncssh")
files = lazy("gpu_rent.to_vm.files")
sync = lazy("gpu_rent.to_vm.sync")
vm_ssh = lazy("gpu_rent.to_vm.ssh")
watchdog = lazy("gpu_rent.watch.watchdog")
asyncio = lazy("asyncio")  # the event loop of ssh and logs; notify has its own
notifier = lazy("gpu_rent.util.notify")  # the desktop, at the end of up
# only `setup` asks and logs in: every other command starts without them (~25 ms of `status`)
setup_login = lazy("gpu_rent.setup.login")
setup_prompts = lazy("gpu_rent.setup.prompts")
setup_wizard = lazy("gpu_rent.setup.wizard")

# keystoneauth warns on stderr on its own ("Failed to discover available identity versions ...") before the
# failure that the command then reports in its one line: the user gets that line only.
logging.getLogger("keystoneauth").addHandler(logging.NullHandler())
logging.getLogger("keystoneauth").propagate = False
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


def _settings(project: Path, known_cloud: KnownCloud | None = None) -> config.Settings:
    try:
        return config.load(project, known_cloud=known_cloud)
    except ConfigError as e:
        error(str(e))
        raise typer.Exit(ExitCode.BAD_INPUT) from None


def _fail(e: Exception) -> typer.Exit:
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


def _transfer_errors() -> tuple[type[Exception], ...]:
    """SSH to the VM or a copy failed: one line (the message says why), exit 1 like any failed step."""
    return (vm_ssh.SshError, sync.SyncError)


# up reads the idle-killer's status once it has looked, beside the rest of the run; older than this, read again
KILLER_READ_FRESH_SECONDS = 20
# a command that ran this long ends with a desktop notification (SPEC §11): its user has looked away by then;
# a shorter one is watched to its end, and a notification would only be noise
LONG_SECONDS = 30.0
_clock = time.monotonic  # how long a command ran (the tests set it)


def _tells_when_long(what: str) -> Callable:
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


def handled() -> tuple[type[Exception], ...]:
    """The failures a command reports in one line and an exit code (_fail), not with a traceback."""
    return (ConfigError, StateError, CloudUnreachable, OperationFailed, *cloud_errors(), OSError)


def _rental(settings: config.Settings) -> Rental:
    return Rental(settings, say=note, progress=playbook_progress)


def _print_plan(items: list[PlanItem]) -> None:
    """One line per resource, never cropped: the price must reach the user whatever the terminal width."""
    what = max(len(i.what) for i in items)
    name = max(len(i.name) for i in items)
    for item in items:
        style = "bold yellow" if item.action == "create" else "dim"
        columns = f"{escape(item.what):<{what}}  {escape(item.name):<{name}}  {escape(item.detail)}"
        console.print(f"[{style}]{item.action:<6}[/] {columns}".rstrip())


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


@app.command()
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
    settings: Annotated[
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
        project,
        cloud_name,
        clouds_yaml,
        pool,
        flavor,
        image,
        key,
        new_key,
        login=login,
        price=price,
        flavor_fallback=None if flavor_fallback is None else tuple(flavor_fallback),
        operator_cidr=operator_cidr,
        settings=tuple(settings or ()),
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
        raise _fail(e) from None
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


@app.command()
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
    settings = _settings(project)

    def confirm(items: list[PlanItem]) -> bool:
        _print_plan(items)
        if yes:
            return True
        if not sys.stdin.isatty():
            raise ConfigError("arguments", "up would rent a server: confirm with --yes (no terminal to ask on)")
        return typer.confirm("Rent it?", default=False)

    rental = _rental(settings)
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
        raise _fail(e) from None
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
        _open_tunnel(settings, watch_seconds, after_up=True, stop_on_exit=stop_on_exit)
    notifier.notify("gpu-rent: SwarmUI is ready", watchdog.url(settings) if tunnel else f"{settings.name} is ready")


def _open_tunnel(
    settings: config.Settings,
    watch_seconds: float = WATCH_SECONDS,
    after_up: bool = False,
    stop_on_exit: bool = False,
) -> dict:
    """The project's background tunnel, started when none runs; exits with one line when it cannot."""
    record = watchdog.read_record(settings)
    if record is None:
        _target(settings)  # no VM yet is bad input, said here rather than by a child process
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


@app.command()
@_tells_when_long("stop")
def stop(
    project: ProjectOption = Path("."),
    no_pull: Annotated[bool, typer.Option("--no-pull", help="Do not copy new outputs to ./Output first.")] = False,
) -> None:
    """Delete the VM and its floating IP; the boot and data volumes stay for the next up.

    With PULL_OUTPUT (the default) new outputs are copied to ./Output first, when the VM answers.
    """
    settings = _settings(project)
    _wait_for_the_lock(settings, "stop")
    if settings.pull_output and not no_pull:
        _pull_before_stop(settings)
    closed = watchdog.close_background(settings)  # this project's tunnel first: its watchdog must not act
    if closed:
        note(f"tunnel closed (pid {closed['pid']})")
    try:
        state = _rental(settings).stop()
    except handled() as e:
        raise _fail(e) from None
    kept = ", ".join(f"{k} {v}" for k, v in state.resources.items() if k in ("boot_volume", "data_volume"))
    console.print(f"[green]stopped[/]: no server is billing; kept {kept or 'no volumes'}")


def _wait_for_the_lock(settings: config.Settings, command: str) -> None:
    """Refuse at once, touching nothing (not even the tunnel), when another command holds the project."""
    try:
        with StateStore(settings.project_dir).lock(command):
            pass
    except handled() as e:
        raise _fail(e) from None


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
    except handled():
        return  # the stop itself says what is wrong with the cloud
    if result.files_sent:
        console.print(f"pulled to {files.output_dir(settings)}: {files.summary(result)}")


def _seed(part: str, project: Path, update: bool = False) -> None:
    settings = _settings(project)
    if not settings.seed[part]:
        console.print(f"seed.yml lists no {part}: nothing to do")
        return
    try:
        _rental(settings).seed(part, update)
    except handled() as e:
        raise _fail(e) from None
    count = len(settings.seed[part])
    console.print(f"[green]seeded[/] {part}: {count} entr{'y' if count == 1 else 'ies'} of seed.yml in place")


@app.command("seed-extensions")
@_tells_when_long("seed-extensions")
def seed_extensions(
    project: ProjectOption = Path("."),
    update: Annotated[
        bool, typer.Option("--update", help="Fetch every extension again, also when seed.yml did not change.")
    ] = False,
) -> None:
    """Clone the extensions listed in seed.yml; SwarmUI rebuilds and restarts only when one changed."""
    _seed("extensions", project, update)


@app.command("seed-models")
@_tells_when_long("seed-models")
def seed_models(project: ProjectOption = Path(".")) -> None:
    """Download the models listed in seed.yml, checking each sha256; an interrupted download resumes."""
    _seed("models", project)


@app.command("seed-autocomplete")
@_tells_when_long("seed-autocomplete")
def seed_autocomplete(project: ProjectOption = Path(".")) -> None:
    """Download the autocomplete lists listed in seed.yml."""
    _seed("autocomplete", project)


@app.command("seed-llm")
@_tells_when_long("seed-llm")
def seed_llm(project: ProjectOption = Path(".")) -> None:
    """Install the LLM runtime (LLM_RUNTIME=ollama or llamacpp) on the running VM and bring ollama-models.yaml's models.

    A model already there is not downloaded again; an interrupted download resumes.
    """
    settings = _settings(project)
    try:
        _rental(settings).seed_llm()
    except handled() as e:
        raise _fail(e) from None
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


@app.command()
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
    settings = _settings(project)
    try:
        end = hold_until(time.time(), settings.idle_minutes, minutes, until, clear)
        _rental(settings).hold(end)
    except handled() as e:
        raise _fail(e) from None
    if end is None:
        console.print("[green]hold cleared[/]: the idle-killer counts as usual")
    else:
        console.print(f"[green]held[/] until {datetime.fromtimestamp(end).astimezone():%Y-%m-%d %H:%M %Z}")


@app.command("resize-data")
@_tells_when_long("resize-data")
def resize_data(
    gb: Annotated[int, typer.Option("--gb", min=1, help="New size of the data volume in GiB; it only grows.")],
    project: ProjectOption = Path("."),
) -> None:
    """Grow the data volume (models, outputs) and its filesystem; the data stays.

    Online while the VM runs where the cloud allows it; otherwise the filesystem grows at the next up.
    Shrinking is refused: volumes only grow.
    """
    settings = _settings(project)
    try:
        _, before = _rental(settings).resize_data(gb)
    except handled() as e:
        raise _fail(e) from None
    if before == gb:
        console.print(f"the data volume is already {gb} GB: nothing to do")
        return
    console.print(f"[green]grown[/]: the data volume is {gb} GB (was {before} GB)")
    if settings.data_volume_gb != gb:
        note(f"set DATA_VOLUME_GB={gb} in gpu-rent.vars to keep the settings in step")


@app.command()
@_tells_when_long("destroy")
def destroy(
    project: ProjectOption = Path("."),
    i_understand_data_loss: Annotated[
        bool,
        typer.Option("--i-understand-data-loss", help="Required: the volumes (models, outputs, settings) are deleted."),
    ] = False,
    no_pull: Annotated[bool, typer.Option("--no-pull", help="Do not copy new outputs to ./Output first.")] = False,
) -> None:
    """Delete everything: the VM, the floating IP, both volumes, the network. Only with --i-understand-data-loss."""
    settings = _settings(project)
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
        _rental(settings).destroy()
    except handled() as e:
        raise _fail(e) from None
    console.print("[green]destroyed[/]: nothing of this project is left in the cloud")


@app.command()
def status(
    project: ProjectOption = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Ask the cloud (never only the local state): phase, server, address, volumes, cost, leftovers."""
    # a configuration unchanged since a status read the cloud through openstacksdk is not checked by it again
    settings = _settings(project, known_cloud=cloud_route.fits)
    try:
        report = status_report(settings, say=note)
    except handled() as e:
        raise _fail(e) from None
    if as_json:
        console.print_json(json.dumps(report.to_json()))
        return
    report.render(console)


def _say(message: str) -> None:
    """A timestamped line for the long-running tunnel and watchdog (their log file in the background)."""
    err.print(f"[dim]{datetime.now():%H:%M:%S}[/] {escape(message)}", soft_wrap=True)


@app.command("tunnel")
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
    settings = _settings(project)
    if close:
        closed = watchdog.close_background(settings)
        console.print(f"tunnel closed (pid {closed['pid']}); the VM keeps running" if closed else "no tunnel runs")
        return
    if background:
        _open_tunnel(settings, watch_seconds, stop_on_exit=stop_on_exit)
        return
    running = watchdog.read_record(settings)
    if running is not None:
        note(f"a tunnel already runs: {running['url']} (pid {running['pid']}); `gpu-rent tunnel --close` closes it")
        return
    _run_session(settings, watch_seconds, forward=True, stop_on_exit=stop_on_exit)


def _run_session(settings: config.Settings, watch_seconds: float, forward: bool, stop_on_exit: bool = False) -> None:
    """The tunnel and/or watchdog in the foreground until Ctrl+C or its end; exits with its code."""
    try:
        code = watchdog.run_foreground(settings, _say, watch_seconds, forward=forward, stop_on_exit=stop_on_exit)
    except watchdog.SessionEnded as e:
        error(str(e))
        raise typer.Exit(e.code) from None
    except handled() as e:
        raise _fail(e) from None
    raise typer.Exit(code)


@app.command("watchdog")
def watchdog_command(project: ProjectOption = Path("."), watch_seconds: WatchOption = WATCH_SECONDS) -> None:
    """Watch the server without a tunnel: bring back a preempted VM, say why when it cannot. Ctrl+C ends it."""
    _run_session(_settings(project), watch_seconds, forward=False)


@app.command("sentinel", hidden=True)
def sentinel_command(
    pid: Annotated[int, typer.Option("--pid", help="The tunnel process to watch.")], project: ProjectOption = Path(".")
) -> None:
    """--stop-on-exit's watcher: stops the VM when the tunnel process PID dies without closing cleanly."""
    raise typer.Exit(watchdog.sentinel(_settings(project), pid, _say))


@app.command("open")
def open_command(project: ProjectOption = Path(".")) -> None:
    """Open SwarmUI in the browser, opening the tunnel first when none runs."""
    import webbrowser

    from gpu_rent.util import wsl

    settings = _settings(project)
    record = _open_tunnel(settings)
    # In WSL the browser is Windows'; Python's webbrowser would look for one inside Linux
    if not (wsl.open_in_windows(record["url"]) or webbrowser.open(record["url"])):
        note(f"no browser found here: open {record['url']} yourself")


ChecksumOption = Annotated[
    bool, typer.Option("--checksum", help="Compare sha256 instead of size and modification time (slower).")
]


@app.command()
@_tells_when_long("push")
def push(project: ProjectOption = Path("."), checksum: ChecksumOption = False) -> None:
    """Copy the project's Models, Wildcards and workflows folders (PUSH_FOLDERS) to the data volume.

    Only new and changed files travel; an interrupted push resumes; the idle-killer waits for it.
    """
    settings = _settings(project)
    target = _target(settings)
    try:
        with StateStore(settings.project_dir).lock("push"), transfer_progress("pushing") as show:
            result = files.push(settings, target, checksum, show)
    except (*handled(), *_transfer_errors()) as e:
        raise _fail(e) from None
    for missing in result.missing:
        note(f"{missing}: no such folder here, skipped")
    console.print(f"[green]pushed[/]: {files.summary(result)}")


@app.command("pull-output")
@_tells_when_long("pull-output")
def pull_output(project: ProjectOption = Path("."), checksum: ChecksumOption = False) -> None:
    """Copy new outputs from the VM into ./Output; nothing is deleted on either side; resumable."""
    settings = _settings(project)
    target = _target(settings)
    try:
        with transfer_progress("pulling Output") as show:
            result = files.pull_output(settings, target, checksum, show)
    except (*handled(), *_transfer_errors()) as e:
        raise _fail(e) from None
    if result.missing:
        note("the VM has no Output folder yet: nothing generated")
    console.print(f"[green]pulled[/] to {files.output_dir(settings)}: {files.summary(result)}")


def _target(settings: config.Settings) -> vm_ssh.Target:
    try:
        state = load_state(StateStore(settings.project_dir), note)
    except handled() as e:
        raise _fail(e) from None
    try:
        return vm_ssh.Target.of(settings, state.resources)
    except vm_ssh.SshError as e:
        error(str(e))
        raise typer.Exit(ExitCode.BAD_INPUT) from None


@app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def ssh_command(ctx: typer.Context, project: ProjectOption = Path(".")) -> None:
    """A shell on the VM (or: gpu-rent ssh -- COMMAND), as root, with the project's key and pinned host key."""
    import shutil
    import subprocess

    settings = _settings(project)
    target = _target(settings)
    if not shutil.which("ssh"):
        error("no ssh client on this machine: install OpenSSH (Windows: Settings → Optional features → OpenSSH Client)")
        raise typer.Exit(ExitCode.FAILED)
    if not vm_ssh.pinned_keys(target.known_hosts, target.alias):
        try:
            asyncio.run(vm_ssh.run(target, "true"))  # pins the host key the first time, as every command does
        except vm_ssh.SshError as e:
            error(str(e))
            raise typer.Exit(ExitCode.FAILED) from None
    command = [
        "ssh", "-i", str(target.key), "-p", str(target.port), "-o", "StrictHostKeyChecking=yes",
        "-o", f'UserKnownHostsFile="{target.known_hosts}"', "-o", f"HostKeyAlias={target.alias}",
        "-o", "LogLevel=ERROR", f"{target.user}@{target.address}", *ctx.args,
    ]  # fmt: skip
    raise typer.Exit(subprocess.call(command))


@app.command()
def logs(
    project: ProjectOption = Path("."),
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until Ctrl+C.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, help="How many recent lines.")] = 100,
    unit: Annotated[str, typer.Option("--unit", "-u", help="swarmui, killer or all.", show_default=True)] = "all",
) -> None:
    """The journal of SwarmUI and the idle-killer on the VM."""
    units = {"swarmui": ["swarmui"], "killer": ["gpu-rent-idle-killer"], "all": ["swarmui", "gpu-rent-idle-killer"]}
    if unit not in units:
        error(f"--unit {unit}: not one of swarmui, killer, all")
        raise typer.Exit(ExitCode.BAD_INPUT)
    settings = _settings(project)
    target = _target(settings)
    command = "journalctl --no-pager -o short-iso -n {} {} {}".format(
        lines, " ".join(f"-u {u}" for u in units[unit]), "-f" if follow else ""
    )
    try:
        code = asyncio.run(_stream(target, command))
    except vm_ssh.SshError as e:
        error(str(e))
        raise typer.Exit(ExitCode.FAILED) from None
    except (asyncssh.Error, OSError) as e:  # the VM went (the idle-killer, a stop) while following
        error(f"the connection to the VM ended: {' '.join(str(e).split()) or type(e).__name__}")
        raise typer.Exit(ExitCode.FAILED) from None
    raise typer.Exit(code)


async def _stream(target: vm_ssh.Target, command: str) -> int:
    async with await vm_ssh.connect(target) as conn, conn.create_process(command, stderr=asyncssh.STDOUT) as proc:
        async for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        await proc.wait()
        return proc.exit_status or 0


@app.command()
def doctor(project: ProjectOption = Path(".")) -> None:
    """Check auth, the catalog, flavors, image, network, quotas and the SSH key. Never changes anything."""
    settings = _settings(project)
    try:
        checks = doctor_checks(settings)
    except handled() as e:
        raise _fail(e) from None
    for check in checks:
        mark = "[green]ok[/]  " if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} {check.name}: {check.detail}")
    if not all(c.ok for c in checks):
        refused = any(c.name == "auth" and not c.ok for c in checks)
        raise typer.Exit(ExitCode.CLOUD_UNREACHABLE if refused else ExitCode.FAILED)


@app.command("dry-run")
def dry_run(project: ProjectOption = Path(".")) -> None:
    """Show what `up` would create or reuse, without changing anything."""
    settings = _settings(project)
    try:
        conn = connect(settings)
        view = cloud.observe(conn, settings.name)
        items = plan(settings, view, conn)
    except handled() as e:
        raise _fail(e) from None
    _print_plan(items)
    try:
        state = load_state(StateStore(settings.project_dir), note)
    except handled() as e:
        raise _fail(e) from None
    console.print(f"[dim]phase now: {state.phase}[/]")


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
