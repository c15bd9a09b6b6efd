"""The interactive `gpu-rent setup`: each answer picked from what the cloud offers, then checked by setup_wizard.

Only the asking lives here. Every pick goes through setup_login's and setup_wizard's checks, the same ones the
options go through, and nothing is written here: the command writes after the last answer, so Ctrl+C at any prompt
leaves the project as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gpu_rent.cloud.connect import CloudUnreachable
from gpu_rent.project.env import CloudAuth
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.llm_models import MODELS_FILE
from gpu_rent.setup import address as setup_address
from gpu_rent.setup import catalog as setup_catalog
from gpu_rent.setup import login as setup_login
from gpu_rent.setup import wizard as setup_wizard
from gpu_rent.setup.login import APP_CREDENTIAL, PASSWORD, Login
from gpu_rent.setup.wizard import Answers, Checked

LOGIN_TRIES = 3
NEW = "new"
NONE = "none"
# the first list's two entries beside the clouds.yaml ones: what is picked -> the kind of typed login
TYPED = {"os-values": PASSWORD, "app-credential": APP_CREDENTIAL}
# the places openstacksdk reads a clouds.yaml from, for the line that says none was found
USUAL_PLACES = "./clouds.yaml, ~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml"
# LLM_RUNTIME's choices, as the last question lists them (setup_wizard.LLM_RUNTIMES, in that order)
LLM_RUNTIME_LINES = {
    NONE: f"{NONE}: SwarmUI alone on the GPU",
    "ollama": f"ollama: Ollama, installed by up; its models listed in {MODELS_FILE}",
    "llamacpp": f"llamacpp: llama.cpp's llama-server, installed by up; its GGUF models listed in {MODELS_FILE}",
}


@dataclass(frozen=True)
class Choice:
    value: str  # what is written to the project
    line: str  # what the list shows
    aliases: tuple[str, ...] = ()  # what else names it (a flavor's or an image's id)


class Prompter:
    """Where the questions go and the answers come from: the terminal, or in tests a script of answers."""

    def __init__(
        self,
        out: Console,
        err: Console,
        read: Callable[[str], str] | None = None,
        read_hidden: Callable[[str], str] | None = None,
    ):
        self.out, self.err = out, err
        self._read = read or (lambda prompt: out.input(prompt))
        # no echo: a password typed here must not stay on the screen nor in a terminal's scrollback
        self._read_hidden = read_hidden or read or (lambda prompt: out.input(prompt, password=True))

    def say(self, markup: str) -> None:
        self.out.print(markup, highlight=False)

    def refuse(self, message: str) -> None:
        self.err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)

    def ask(self, question: str, default: str | None) -> str:
        """The answer, stripped; Enter alone is the default. Ctrl+C raises KeyboardInterrupt, Ctrl+D EOFError."""
        shown = f" [cyan]\\[{escape(default)}][/]" if default else ""
        return self._read(f"{escape(question)}{shown}: ").strip() or (default or "")

    def ask_hidden(self, question: str, kept: str | None) -> str:
        """A secret typed without echo, as typed (a password may well have spaces); Enter alone keeps kept."""
        hint = " (hidden; Enter keeps the stored one)" if kept else " (hidden)"
        return self._read_hidden(f"{escape(question)}{hint}: ") or (kept or "")


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


def _typed_choice(login: Login | None) -> str | None:
    return next((word for word, kind in TYPED.items() if login and login.kind == kind), None)


def _required(p: Prompter, question: str, default: str | None, hidden: bool = False) -> str:
    while True:
        answer = p.ask_hidden(question, default) if hidden else p.ask(question, default)
        if answer:
            return answer
        p.refuse(f"{question}: required")


def _auth_url(p: Prompter, default: str | None) -> str:
    while True:
        answer = _required(p, "auth URL (Keystone, e.g. https://keystone.example.com:5000/v3)", default)
        if setup_login.HTTP_URL.fullmatch(answer):
            return answer
        p.refuse(f"{answer}: not an http(s) URL")


def typed_login(p: Prompter, kind: str, known: Login | None) -> Login:
    """The OS_* values of one kind of login, typed; known's values are the defaults, its secret kept on Enter."""
    known = known or Login()
    same = known.kind == kind  # a password is no default for a credential's secret, nor a user for its id
    url = _auth_url(p, known.auth_url)
    if kind == PASSWORD:
        username = _required(p, "username", known.username if same else None)
        password = _required(p, "password", known.password if same else None, hidden=True)
        project = _required(p, "project name", known.project_name if same else None)
        user_domain = _required(p, "user domain", (same and known.user_domain) or setup_login.DEFAULT_DOMAIN)
        domain = _required(p, "project domain", (same and known.project_domain) or setup_login.DEFAULT_DOMAIN)
        login = Login(kind, url, username, password, project, user_domain, domain)
    else:
        credential = _required(p, "application credential id", known.credential_id if same else None)
        secret = _required(p, "application credential secret", known.credential_secret if same else None, True)
        login = Login(kind, url, credential_id=credential, credential_secret=secret)
    region = p.ask("region (Enter: the one the catalog has)", known.region)
    return replace(login, region=None if region.lower() == NONE else region or None)


def region(p: Prompter, answers: Answers, auth: CloudAuth, conn, login: Callable) -> tuple[Answers, CloudAuth, object]:
    """A typed login's region, checked against the catalog the login brought: its only one, or picked from it."""
    if answers.login is None:
        return answers, auth, conn
    regions = setup_login.catalog_regions(conn)
    wanted = answers.login.region
    if regions and wanted not in regions:
        if wanted:
            p.refuse(f"region {wanted}: not in the cloud's catalog (regions: {', '.join(regions)})")
        if len(regions) == 1:
            wanted = regions[0]
        else:
            wanted = choose(p, "Region (from the cloud's catalog)", [Choice(r, r) for r in regions], None)
    answers, auth, conn = setup_wizard.in_region(auth, conn, answers, wanted, login)
    if wanted:
        p.say(f"region: {escape(wanted)}")
    return answers, auth, conn


def _logged_in(p: Prompter, auth: CloudAuth, login: Callable):
    """The connection of a login Keystone accepted and `up` can use: a restricted application credential is
    refused like a wrong secret, its connection closed."""
    conn = login(auth)
    try:
        setup_login.check_credential(conn, p.warn)
    except ConfigError:
        conn.close()
        raise
    return conn


def credentials(p: Prompter, answers: Answers, login: Callable) -> tuple[Answers, CloudAuth, object]:
    """A clouds.yaml entry or typed OS_* values whose login Keystone accepted, and the open connection; asked
    again after a refusal."""
    try:
        names, where = setup_login.cloud_names(answers.clouds_yaml)
    except ConfigError as e:  # a broken clouds.yaml must not stop typed values
        p.refuse(e.message)
        names, where = [], None
    choices = [Choice(name, _cloud_line(answers, name)) for name in names]
    choices += [
        Choice("os-values", "os-values: type the OS_* values (auth URL, user, password, project)"),
        Choice("app-credential", "app-credential: an application credential (auth URL, id, secret)"),
    ]
    looked = where or answers.clouds_yaml or USUAL_PLACES
    title = f"Cloud (clouds.yaml: {where})" if names else f"Cloud (no clouds.yaml entry in {looked})"
    default = answers.cloud or _typed_choice(answers.login)
    known = answers.login
    for attempt in range(1, LOGIN_TRIES + 1):
        picked = choose(p, title, choices, default)
        typed = None
        try:
            if picked in names:  # an entry named like one of the two words is the entry: it is listed first
                candidate = replace(answers, cloud=picked, login=None)
                auth = setup_login.check_cloud(picked, answers.clouds_yaml)
            else:
                typed = typed_login(p, TYPED[picked], known)
                candidate = replace(answers, cloud=None, login=typed)
                auth = setup_login.check_login(typed)
            conn = _logged_in(p, auth, login)
        except (ConfigError, CloudUnreachable) as e:
            if attempt == LOGIN_TRIES:
                raise
            p.refuse(e.message if isinstance(e, ConfigError) else str(e))
            if typed is None:
                default = None if picked == default else default  # Enter must not try the refused login again
            else:  # the typed values stay the defaults, all but the secret Keystone may have refused
                default, known = picked, replace(typed, password=None, credential_secret=None)
            continue
        p.say(f"[green]logged in[/]: {escape(auth.describe())}")
        return region(p, candidate, auth, conn, login)
    raise AssertionError("unreachable: the last refusal is raised")


def pool(p: Prompter, conn, answers: Answers) -> str:
    zones = setup_wizard.pool_choices(conn)
    if not zones:
        raise ConfigError(setup_login.WHERE, "the cloud lists no availability zone (pool) for this project")
    with_gpus = setup_wizard.gpu_pools(conn)
    title = "Pool (availability zone)" + (", * has GPU flavors" if with_gpus else "")
    choices = [Choice(z, f"{z} *" if with_gpus and z in with_gpus else z) for z in zones]
    return setup_wizard.check_pool(conn, choose(p, title, choices, answers.pool))


def flavor(p: Prompter, conn, answers: Answers) -> tuple[setup_catalog.GpuFlavor, list[Choice]]:
    """GPU flavors only: a CPU flavor is never offered, so it cannot be picked by mistake; the pick and the list."""
    flavors = setup_wizard.flavor_choices(conn)
    if not flavors:
        raise ConfigError(setup_login.WHERE, "the cloud has no GPU flavor (none has a GPU in its extra specs or name)")
    current = setup_catalog.find_flavor(flavors, answers.flavor) if answers.flavor else None
    price = setup_wizard.existing_vars(answers.project).get("PRICE_PER_HOUR")

    def line(f: setup_catalog.GpuFlavor) -> str:
        # PRICE_PER_HOUR is the price of the project's flavor: shown beside that one only
        return f"{f.describe()}, {price}/hour" if price and f is current else f.describe()

    choices = [Choice(f.label, line(f), (f.id,)) for f in flavors]
    return setup_wizard.check_flavor(conn, choose(p, "GPU flavor", choices, answers.flavor)), choices


def price(p: Prompter, answers: Answers, picked: setup_catalog.GpuFlavor) -> str | None:
    """PRICE_PER_HOUR for the flavor picked: its current value the default, unless it was another flavor's."""
    in_project = setup_wizard.existing_vars(answers.project)
    default = answers.price or None
    was_for = in_project.get("FLAVOR")
    if default and default == in_project.get("PRICE_PER_HOUR") and was_for not in (None, picked.label, picked.id):
        p.say(f"[yellow]PRICE_PER_HOUR={escape(default)} in gpu-rent.vars was {escape(was_for)}'s[/]")
        default = None
    hint = f"{NONE}: unset" if default else "Enter to leave unset"
    while True:
        answer = p.ask(f"price per hour of {picked.label} ({hint})", default)
        if not answer or answer.lower() == NONE:
            return None
        try:
            return setup_wizard.check_price(answer)
        except ConfigError:
            p.refuse(f"{answer}: not a price; a number, 0 or more, e.g. 1.25 ({hint})")


def fallbacks(p: Prompter, answers: Answers, picked: setup_catalog.GpuFlavor, choices: list[Choice]) -> tuple:
    """FLAVOR_FALLBACK, picked from the same GPU flavor list; none unless asked for."""
    if len(choices) < 2:
        return ()
    itself = {picked.label, picked.id}
    default = ",".join(f for f in answers.flavor_fallback or () if f not in itself) or None
    hint = f"{NONE}: no fallback" if default else "Enter for none"
    question = f"fallback flavors when {picked.label} has no capacity, in order (numbers or names, {hint})"
    while True:
        answer = p.ask(question, default)
        if not answer or answer.lower() == NONE:
            return ()
        wanted = [part.strip() for part in answer.split(",") if part.strip()]
        found = [pick(choices, w) for w in wanted]
        bad = next((w for w, f in zip(wanted, found, strict=True) if f is None or f in itself), None)
        if bad is None:
            return tuple(dict.fromkeys(found))
        why = "is the flavor itself" if pick(choices, bad) in itself else "not in the GPU flavor list"
        p.refuse(f"{bad}: {why}; numbers or names from the list, comma-separated ({hint})")


def image(p: Prompter, conn, answers: Answers) -> str:
    images = setup_wizard.image_choices(conn)
    if not images:
        raise ConfigError(setup_login.WHERE, "the cloud has no active image")
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


def operator_cidr(p: Prompter, answers: Answers, auth: CloudAuth) -> str | None:
    """OPERATOR_CIDR to write, asked only when auto cannot find this machine's address (NAT); None: the project's
    line stays (auto resolves, or Enter keeps the project's own address)."""
    reach = setup_address.of_login(auth)
    existing = setup_wizard.existing_vars(answers.project).get("OPERATOR_CIDR")
    if reach.auto is not None:
        return setup_address.checked(answers.operator_cidr, reach) if answers.operator_cidr else None
    kept = existing if setup_address.kept(existing) else None
    default = answers.operator_cidr or kept
    while True:
        answer = p.ask(setup_address.question(reach), default)
        if answer and answer == kept:
            return None
        if not answer:
            p.refuse(f"an address is required: {reach.wanted()}")
            continue
        try:
            return setup_address.as_cidr(answer, reach)
        except setup_address.Refused as e:
            p.refuse(f"{answer}: {e}")


def llm_runtime(p: Prompter, answers: Answers) -> str:
    """LLM_RUNTIME: the project's (or --llm-runtime) the default, else none."""
    choices = [Choice(runtime, LLM_RUNTIME_LINES[runtime]) for runtime in setup_wizard.LLM_RUNTIMES]
    title = "LLM runtime beside SwarmUI on the VM's GPU (LLM_RUNTIME)"
    return choose(p, title, choices, answers.llm_runtime or NONE)


def ask(given: Answers, p: Prompter, login: Callable | None = None) -> Checked:
    """Every question in order, the login first; the checked answers, nothing written."""
    answers = setup_wizard.prepared(given)
    setup_wizard.check_project(answers)
    answers, auth, conn = credentials(p, answers, login or setup_login.login)
    try:
        picked_pool = pool(p, conn, answers)
        picked_flavor, flavors = flavor(p, conn, answers)
        picked_price = price(p, answers, picked_flavor)
        picked_fallbacks = fallbacks(p, answers, picked_flavor, flavors)
        picked_image = image(p, conn, answers)
    finally:
        conn.close()
    answers = replace(
        answers,
        pool=picked_pool,
        flavor=picked_flavor.label,
        image=picked_image,
        price=picked_price,
        flavor_fallback=picked_fallbacks,
    )
    answers, key_to_make = ssh_key(p, answers)
    answers = replace(answers, operator_cidr=operator_cidr(p, answers, auth))
    answers = replace(answers, llm_runtime=llm_runtime(p, answers))
    return Checked(answers, auth, picked_flavor, key_to_make)
