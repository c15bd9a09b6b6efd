"""The interactive `gpu-rent setup`: each answer picked from what the cloud offers, then checked by setup_wizard.

Only the asking lives here. Every pick goes through setup_wizard's checks, the same ones the options go through,
and nothing is written here: the command writes after the last answer, so Ctrl+C at any prompt leaves the project
as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gpu_rent import setup_catalog, setup_wizard
from gpu_rent.config import CloudAuth, ConfigError
from gpu_rent.rental import CloudUnreachable
from gpu_rent.setup_wizard import Answers, Checked

LOGIN_TRIES = 3
NEW = "new"
# the places openstacksdk reads a clouds.yaml from, for the line that says none was found
USUAL_PLACES = "./clouds.yaml, ~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml"


@dataclass(frozen=True)
class Choice:
    value: str  # what is written to the project
    line: str  # what the list shows
    aliases: tuple[str, ...] = ()  # what else names it (a flavor's or an image's id)


class Prompter:
    """Where the questions go and the answers come from: the terminal, or in tests a script of answers."""

    def __init__(self, out: Console, err: Console, read: Callable[[str], str] | None = None):
        self.out, self.err = out, err
        self._read = read or (lambda prompt: out.input(prompt))

    def say(self, markup: str) -> None:
        self.out.print(markup, highlight=False)

    def refuse(self, message: str) -> None:
        self.err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)

    def ask(self, question: str, default: str | None) -> str:
        """The answer, stripped; Enter alone is the default. Ctrl+C raises KeyboardInterrupt, Ctrl+D EOFError."""
        shown = f" [cyan]\\[{escape(default)}][/]" if default else ""
        return self._read(f"{escape(question)}{shown}: ").strip() or (default or "")


def pick(choices: Sequence[Choice], answer: str) -> str | None:
    """What the answer names: a name (or id) as typed, so a project's value stays as written; or a list number.

    Names win over numbers: a Selectel flavor is named by a number, and "1311" is that flavor, not line 1311.
    """
    for choice in choices:
        if answer == choice.value or answer in choice.aliases:
            return answer
    if answer.isdigit() and 1 <= int(answer) <= len(choices):
        return choices[int(answer) - 1].value
    return None


def choose(p: Prompter, title: str, choices: Sequence[Choice], default: str | None) -> str:
    """A numbered list and a question until the answer names one of it; the default only when it is one."""
    p.say(f"[bold]{escape(title)}[/]")
    width = len(str(len(choices)))
    for number, choice in enumerate(choices, 1):
        p.say(f"  {number:>{width}}. {escape(choice.line)}")
    if default is None or pick(choices, default) is None:
        default = choices[0].value if len(choices) == 1 else None
    while True:
        answer = p.ask("number or name", default)
        picked = pick(choices, answer) if answer else None
        if picked is not None:
            return picked
        p.refuse(f"{answer or 'nothing'}: not in the list; a number from 1 to {len(choices)}, or a name from it")


# ---------------------------------------------------------------------------------------------- each question


def _cloud_line(answers: Answers, name: str) -> str:
    try:  # the address and project, never the password; an entry openstacksdk cannot resolve is shown by name
        return CloudAuth(cloud=name, config_file=answers.clouds_yaml).describe()
    except Exception:
        return name


def credentials(p: Prompter, answers: Answers, login: Callable) -> tuple[CloudAuth, object]:
    """A clouds.yaml entry whose login Keystone accepted, and the open connection; re-asked after a refusal."""
    names, where = setup_wizard.cloud_names(answers)
    if not names:
        looked = where or answers.clouds_yaml or USUAL_PLACES
        raise ConfigError(setup_wizard.WHERE, f"no cloud in a clouds.yaml (looked in {looked}): add one, see README")
    choices = [Choice(name, _cloud_line(answers, name)) for name in names]
    default = answers.cloud
    for attempt in range(1, LOGIN_TRIES + 1):
        name = choose(p, f"Cloud (clouds.yaml: {where})", choices, default)
        try:
            auth = setup_wizard.check_cloud(replace(answers, cloud=name))
            conn = login(auth)
        except (ConfigError, CloudUnreachable) as e:
            if attempt == LOGIN_TRIES:
                raise
            p.refuse(e.message if isinstance(e, ConfigError) else str(e))
            default = None if name == default else default  # Enter must not try the refused login again
            continue
        p.say(f"[green]logged in[/]: {escape(auth.describe())}")
        return auth, conn
    raise AssertionError("unreachable: the last refusal is raised")


def pool(p: Prompter, conn, answers: Answers) -> str:
    zones = setup_wizard.pool_choices(conn)
    if not zones:
        raise ConfigError(setup_wizard.WHERE, "the cloud lists no availability zone (pool) for this project")
    with_gpus = setup_wizard.gpu_pools(conn)
    title = "Pool (availability zone)" + (", * has GPU flavors" if with_gpus else "")
    choices = [Choice(z, f"{z} *" if with_gpus and z in with_gpus else z) for z in zones]
    return setup_wizard.check_pool(conn, choose(p, title, choices, answers.pool))


def flavor(p: Prompter, conn, answers: Answers) -> setup_catalog.GpuFlavor:
    """GPU flavors only: a CPU flavor is never offered, so it cannot be picked by mistake."""
    flavors = setup_wizard.flavor_choices(conn)
    if not flavors:
        raise ConfigError(setup_wizard.WHERE, "the cloud has no GPU flavor (none has a GPU in its extra specs or name)")
    current = setup_catalog.find_flavor(flavors, answers.flavor) if answers.flavor else None
    price = setup_wizard.existing_vars(answers.project).get("PRICE_PER_HOUR")

    def line(f: setup_catalog.GpuFlavor) -> str:
        # PRICE_PER_HOUR is the price of the project's flavor: shown beside that one only
        return f"{f.describe()}, {price}/hour" if price and f is current else f.describe()

    choices = [Choice(f.label, line(f), (f.id,)) for f in flavors]
    picked = setup_wizard.check_flavor(conn, choose(p, "GPU flavor", choices, answers.flavor))
    if price and current is not None and picked != current:
        p.say(f"[yellow]PRICE_PER_HOUR={escape(price)} in gpu-rent.vars is {escape(current.label)}'s: update it[/]")
    return picked


def image(p: Prompter, conn, answers: Answers) -> str:
    images = setup_wizard.image_choices(conn)
    if not images:
        raise ConfigError(setup_wizard.WHERE, "the cloud has no active image")
    choices = [Choice(setup_catalog.image_label(i), setup_catalog.image_label(i), (str(i["id"]),)) for i in images]
    return setup_wizard.check_image(conn, choose(p, "Image (GPU images first)", choices, answers.image))


def _present(key: Path) -> bool:
    return key.is_file() or key.with_name(key.name + ".pub").is_file()


def ssh_key(p: Prompter, answers: Answers) -> tuple[Answers, Path | None]:
    """An existing key (a path) or new; the answers with it, and the key to make (None: it is there)."""
    # --new-key (with --key: where) says where new goes, as it does without the prompts
    made_here = answers.key if answers.new_key else answers.project / setup_wizard.NEW_KEY_NAME
    default = str(answers.key) if _present(answers.key) else NEW
    p.say(f"[bold]SSH key[/] for the VM: the path of a private key, or {NEW} (an ed25519 key made as {made_here})")
    while True:
        answer = p.ask("key", default)
        if answer.lower() == NEW:
            candidate = replace(answers, key=made_here, new_key=True)
        else:
            # the default as the project holds it; a typed path is relative to the shell, as --key is
            key = answers.key if answer == default else (Path.cwd() / Path(answer).expanduser()).resolve()
            candidate = replace(answers, key=key, new_key=False)
        try:
            return candidate, setup_wizard.check_key(candidate)
        except ConfigError:
            p.refuse(f"{candidate.key}: no such key (nor its .pub); a path of a private key, or {NEW}")


def ask(given: Answers, p: Prompter, login: Callable | None = None) -> Checked:
    """Every question in order, the login first; the checked answers, nothing written."""
    answers = setup_wizard.prepared(given)
    setup_wizard.check_project(answers)
    auth, conn = credentials(p, answers, login or setup_wizard.login)
    answers = replace(answers, cloud=auth.cloud)
    try:
        picked_pool = pool(p, conn, answers)
        picked_flavor = flavor(p, conn, answers)
        picked_image = image(p, conn, answers)
    finally:
        conn.close()
    answers = replace(answers, pool=picked_pool, flavor=picked_flavor.label, image=picked_image)
    answers, key_to_make = ssh_key(p, answers)
    return Checked(answers, auth, picked_flavor, key_to_make)
