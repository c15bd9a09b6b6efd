"""Bad input, on the ground: every mistake a user can make in a project folder, as one table.

Each case gets its own project folder (a copy of the ground's with its own NAME), runs one gpu-rent
command as a user would (a subprocess in the folder, nothing of this shell's OS_* or GPU_RENT_*), and
must:

- exit with the documented code (docs/commands.md, "Exit codes"): 2 bad input, 4 the cloud did not answer or
  refused the credentials;
- say so in exactly one line on stderr, `error: <file>[:<line>]: ...` naming the file, key or
  argument that is wrong (the whole line is matched), with nothing on stdout;
- never show a Python traceback, nor the password it was given;
- leave the cloud as it was: servers, volumes, snapshots, floating IPs, networks, routers, security
  groups, key pairs and the idle-killer's credential named after the project's NAME are the same
  after the command as before it.

The one case that is not a refusal is a corrupt state file: it is moved aside with one line and the
command goes on (docs/phases.md).

The cases run side by side, each one short process, and the cloud is listed once before and once
after all of them: the table costs seconds, not seconds per case.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.groundkit import CLOUDS_YAML, PROJECT, Cloud, connect, require_ground

BIN = Path(sys.executable).parent
SECRET = "not-the-password-4711"  # never to be shown, whatever the mistake
TIMEOUT = 120  # a refusal takes seconds (tens beside the background runs); still running after this, it rents


@dataclass(frozen=True)
class Case:
    """One mistake: how the project is spoiled, the command, and the one line it must answer with.

    `says` is a regular expression for the whole line; `<project>`, `<name>` and `<data>` (the data
    volume's name) stand for this case's values, `<n>` for the line number of the first line the case
    added to gpu-rent.vars, `<e>` for that of .env.
    """

    id: str
    command: tuple[str, ...]
    code: int
    says: str
    vars: dict[str, str | None] = field(default_factory=dict)  # KEY -> new value, None: the line removed
    vars_lines: str = ""  # appended to gpu-rent.vars as written
    env: dict[str, str | None] = field(default_factory=dict)
    env_lines: str = ""
    prepare: Callable[[Path], None] | None = None  # more spoiling of the folder
    in_cloud: Callable[[Cloud, str], None] | None = None  # what the cloud holds first (made and removed here)
    check: Callable[[Path, subprocess.CompletedProcess], None] | None = None
    bad_name: bool = False  # NAME itself is the mistake


def clouds_yaml(**auth: str) -> Callable[[Path], None]:
    """The project gets a clouds.yaml of its own: the ground's member cloud with `auth` changed."""

    def write(project: Path) -> None:
        clouds = yaml.safe_load(CLOUDS_YAML.read_text())
        clouds["clouds"]["ground"]["auth"].update(auth)
        (project / "clouds.yaml").write_text(yaml.safe_dump(clouds))

    return write


def key_without_pub(project: Path) -> None:
    shutil.copy(PROJECT / "id_ed25519", project / "key")


def key_of_another_pair(project: Path) -> None:
    """The project's .pub beside a private key of another pair: the VM would get a key nobody here holds."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(project / "key")], check=True)
    shutil.copy(PROJECT / "id_ed25519.pub", project / "key.pub")


def garbage_state(project: Path) -> None:
    (project / ".gpu-rent").mkdir()
    (project / ".gpu-rent" / "state.json").write_bytes(b'{"phase": "provisi')


def state_moved_aside(project: Path, result: subprocess.CompletedProcess) -> None:
    runtime = project / ".gpu-rent"
    aside = sorted(runtime.glob("state.json.corrupt-*"))
    assert [p.read_bytes() for p in aside] == [b'{"phase": "provisi'], "the corrupt file is kept, as it was"
    # rebuilt from the cloud: nothing of this NAME there, so idle (and nothing to write down)
    assert not (runtime / "state.json").exists() or '"phase": "idle"' in (runtime / "state.json").read_text()
    assert re.search(r"^phase +idle ", result.stdout, re.M), result.stdout


def volume_of_2_gb(cloud: Cloud, name: str) -> None:
    cloud.volume(2, name=f"{name}-data")


OS_VARS = (
    "OS_USERNAME=gpu-rent-user\nOS_PROJECT_NAME=gpu-rent\nOS_USER_DOMAIN_NAME=Default\n"
    f"OS_PROJECT_DOMAIN_NAME=Default\nOS_PASSWORD={SECRET}\n"
)
UP = ("up", "--yes")

CASES = [
    # --- gpu-rent.vars
    Case("vars: unknown key", UP, 2,
         r"error: gpu-rent\.vars:<n>: unknown key IDLE_MINUTE \(did you mean IDLE_MINUTES\?\)",
         vars_lines="IDLE_MINUTE=10\n"),
    Case("vars: port out of range", UP, 2,
         r"error: gpu-rent\.vars:<n>: LOCAL_PORT=70000 is out of range \(a TCP port, 1\.\.65535\)",
         vars_lines="LOCAL_PORT=70000\n"),
    Case("vars: port not a number", ("dry-run",), 2,
         r"error: gpu-rent\.vars:<n>: REMOTE_PORT=http is not a whole number \(a TCP port, 1\.\.65535\)",
         vars_lines="REMOTE_PORT=http\n"),
    Case("vars: bad bool", ("doctor",), 2,
         r"error: gpu-rent\.vars:<n>: KEEP_FLOATING_IP=maybe is not a yes/no value "
         r"\(true/false, yes/no, on/off or 1/0\)",
         vars_lines="KEEP_FLOATING_IP=maybe\n"),
    Case("vars: POOL missing", UP, 2,
         r"error: gpu-rent\.vars: POOL is required \(the availability zone \(pool\) to rent in, e\.g\. POOL=ru-7a\)",
         vars={"POOL": None}),
    Case("vars: bad NAME", UP, 2,
         r"error: gpu-rent\.vars:\d+: NAME=<name> is not a valid name "
         r"\(a lowercase letter, then up to 30 of a-z, 0-9 and -\)",
         bad_name=True),
    Case("vars: subnet CIDR too small", UP, 2,
         r"error: gpu-rent\.vars:<n>: SUBNET_CIDR=192\.168\.77\.0/30 is too small "
         r"\(an IPv4 network of /29 or larger, e\.g\. 192\.168\.77\.0/24\)",
         vars_lines="SUBNET_CIDR=192.168.77.0/30\n"),
    Case("vars: operator CIDR not a network", ("doctor",), 2,
         r"error: gpu-rent\.vars:\d+: OPERATOR_CIDR=my-laptop is not an IP network "
         r"\(auto, or an IP address or network such as 203\.0\.113\.7/32\)",
         vars={"OPERATOR_CIDR": "my-laptop"}),
    Case("vars: OPERATOR_CIDR of every address", UP, 2,
         r"error: gpu-rent\.vars: OPERATOR_CIDR=0\.0\.0\.0/0 is every address: SSH open to the world is refused "
         r"\(auto, or your address such as 203\.0\.113\.7/32\)",
         vars={"OPERATOR_CIDR": "0.0.0.0/0"}),
    Case("vars: duplicated key", UP, 2,
         r"error: gpu-rent\.vars:<n>: FLAVOR is given twice \(lines \d+ and <n>\)",
         vars_lines="FLAVOR=gpu.l4.1\n"),
    Case("vars: line without =", UP, 2,
         r"error: gpu-rent\.vars:<n>: line 'IDLE_MINUTES 30' has no '=' \(expected KEY=VALUE\)",
         vars_lines="IDLE_MINUTES 30\n"),
    # --- .env
    Case(".env: a line that is no setting", UP, 2,
         r"error: \.env:<e>: line is not KEY=VALUE \(its text is not shown: \.env holds secrets\)",
         env_lines="this is not a setting\n"),
    Case(".env: unmatched quote, the secret unshown", UP, 2,
         r"error: \.env:<e>: OS_PASSWORD= has a value that cannot be read \(an unmatched quote\?\)",
         env_lines=f'OS_PASSWORD="{SECRET}\n'),
    Case(".env: unknown key", UP, 2,
         r"error: \.env:<e>: unknown key AWS_SECRET_ACCESS_KEY "
         r"\(allowed: OS_\* cloud auth, GPU_RENT_SSH_KEY, CIVITAI_TOKEN\)",
         env_lines="AWS_SECRET_ACCESS_KEY=x\n"),
    Case(".env: OS_CLOUD not in clouds.yaml", ("status",), 2,
         r"error: \.env: OS_CLOUD=nope is not in .+/clouds\.yaml \(clouds there: ground, ground-admin\)",
         env={"OS_CLOUD": "nope"}),
    # --- arguments
    Case("hold --minutes -5", ("hold", "--minutes", "-5"), 2,
         r"error: arguments: --minutes -5: a hold lasts at least 1 minute"),
    Case("resize-data --gb 0", ("resize-data", "--gb", "0"), 2,
         r"error: Invalid value for '--gb': .*1 \(see gpu-rent resize-data --help\)"),
    Case("resize-data before any data volume", ("resize-data", "--gb", "8"), 2,
         r"error: --gb: there is no data volume <data> yet: gpu-rent up makes it"),
    Case("resize-data smaller than the volume", ("resize-data", "--gb", "1"), 2,
         r"error: --gb: 1 GB is smaller than the data volume \(2 GB\): volumes only grow",
         in_cloud=volume_of_2_gb),
    Case("destroy without --i-understand-data-loss", ("destroy",), 2,
         r"error: destroy deletes the boot and data volumes \(every model, output and setting\): "
         r"pass --i-understand-data-loss"),
    Case("logs --unit bogus", ("logs", "--unit", "bogus"), 2,
         r"error: --unit bogus: not one of swarmui, killer, all"),
    Case("up with an option it does not have", ("up", "--yes", "--pool", "ru-7b"), 2,
         r"error: No such option: --pool \(see gpu-rent up --help\)"),
    Case("up --project at a missing folder", ("up", "--yes", "--project", "<project>/no such folder"), 2,
         r"error: gpu-rent\.vars: not found in <project>/no such folder "
         r"\(run gpu-rent in a project folder, or pass --project\)"),
    # --- state
    Case("state.json garbage: moved aside, rebuilt", ("status",), 0,
         r"\.gpu-rent/state\.json was unreadable \(not JSON: Unterminated string starting at \(line 1, column 11\)\); "
         r"moved to state\.json\.corrupt-\d{8}T\d{6}Z; `gpu-rent status` rebuilds it from the cloud",
         prepare=garbage_state, check=state_moved_aside),
    # --- the SSH key
    Case("ssh key file missing", UP, 2,
         r"error: \.env: GPU_RENT_SSH_KEY=<project>/nowhere/id_ed25519: <project>/nowhere/id_ed25519 not found "
         r"\(ssh-keygen -t ed25519 -f <project>/nowhere/id_ed25519\)",
         env={"GPU_RENT_SSH_KEY": "./nowhere/id_ed25519"}),
    Case("ssh key without its .pub", UP, 2,
         r"error: \.env: GPU_RENT_SSH_KEY=<project>/key: <project>/key\.pub not found "
         r"\(ssh-keygen -y -f <project>/key > <project>/key\.pub\)",
         env={"GPU_RENT_SSH_KEY": "key"}, prepare=key_without_pub),
    Case("ssh key and .pub of two pairs", UP, 2,
         r"error: \.env: GPU_RENT_SSH_KEY=<project>/key: the key and <project>/key\.pub are not one pair "
         r"\(ssh-keygen -y -f <project>/key > <project>/key\.pub\)",
         env={"GPU_RENT_SSH_KEY": "key"}, prepare=key_of_another_pair),
    # --- names the cloud does not have: refused after asking it, before anything is created
    Case("flavor the cloud lacks", UP, 2,
         r"error: gpu-rent\.vars: FLAVOR: flavor gpu\.z999\.1 does not exist in this cloud",
         vars={"FLAVOR": "gpu.z999.1"}),
    Case("fallback flavor the cloud lacks", ("dry-run",), 2,
         r"error: gpu-rent\.vars: FLAVOR_FALLBACK: flavor gpu\.z999\.1 does not exist in this cloud",
         vars={"FLAVOR_FALLBACK": "gpu.l4.1,gpu.z999.1"}),
    Case("image the cloud lacks", UP, 2,
         r"error: gpu-rent\.vars: IMAGE=Windows 95 GPU: no such image in this cloud",
         vars={"IMAGE": "Windows 95 GPU"}),
    Case("pool the cloud lacks", UP, 2,
         r"error: gpu-rent\.vars: POOL=ru-9z: no such pool here \(pools: [^)]*ru-7a[^)]*\)",
         vars={"POOL": "ru-9z"}),
    Case("fallback pool the cloud lacks", ("dry-run",), 2,
         r"error: gpu-rent\.vars: POOL_FALLBACK: ru-9z: no such pool here \(pools: [^)]*ru-7a[^)]*\)",
         vars_lines="POOL_FALLBACK=ru-9z\n"),
    Case("SwarmUI pinned before GetGlobalStatus", UP, 2,
         r"error: gpu-rent\.vars: SWARMUI_VERSION=0\.9\.7-Beta is older than 0\.9\.8-Beta, the first release with "
         r"GetGlobalStatus: the idle-killer could not see a running generation\. .*",
         vars={"SWARMUI_VERSION": "0.9.7-Beta"}),
    Case("SwarmUI pinned before GetGlobalStatus, dry-run", ("dry-run",), 2,
         r"error: gpu-rent\.vars: SWARMUI_VERSION=v0\.9\.6 is older than 0\.9\.8-Beta, .*",
         vars={"SWARMUI_VERSION": "v0.9.6"}),
    # --- the cloud itself
    Case("cloud unreachable (OS_AUTH_URL)", UP, 4,
         r"error: cannot reach the cloud \(OS_AUTH_URL \(http://127\.0\.0\.1:9/v3\), project gpu-rent\): "
         r".*Unable to establish connection to http://127\.0\.0\.1:9/v3.*",
         env={"OS_CLOUD": None, "OS_CLIENT_CONFIG_FILE": None, "OS_AUTH_URL": "http://127.0.0.1:9/v3"},
         env_lines=OS_VARS),
    Case("cloud unreachable (clouds.yaml)", ("stop",), 4,
         r"error: cannot reach the cloud \(cloud \"ground\" \(http://127\.0\.0\.1:9/v3\), project gpu-rent\): "
         r".*Unable to establish connection.*",
         env={"OS_CLIENT_CONFIG_FILE": "clouds.yaml"}, prepare=clouds_yaml(auth_url="http://127.0.0.1:9/v3")),
    Case("wrong password", UP, 4,
         r"error: cannot reach the cloud \(cloud \"ground\" \(http://127\.0\.0\.1:5000/v3\), project gpu-rent\): "
         r".*\(HTTP 401\).*",
         env={"OS_CLIENT_CONFIG_FILE": "clouds.yaml"}, prepare=clouds_yaml(password=SECRET)),
    Case("wrong password, destroy", ("destroy", "--i-understand-data-loss"), 4,
         r"error: cannot reach the cloud \(cloud \"ground\" .*\(HTTP 401\).*",
         env={"OS_CLIENT_CONFIG_FILE": "clouds.yaml"}, prepare=clouds_yaml(password=SECRET)),
]  # fmt: skip


# --- one project per case --------------------------------------------------------------------------------------------


def _edit(path: Path, changes: dict[str, str | None], extra: str, tail: str = "") -> int:
    """Change KEY=VALUE lines in place (None drops the line), add `tail`, then `extra`; the line `extra` starts on."""
    lines = []
    for line in path.read_text().splitlines():
        key = line.partition("=")[0].strip()
        if key in changes:
            if changes[key] is not None:
                lines.append(f"{key}={changes[key]}")
            continue
        lines.append(line)
    lines += [f"{k}={v}" for k, v in changes.items() if v is not None and not any(x.startswith(f"{k}=") for x in lines)]
    lines += tail.splitlines()
    path.write_text("\n".join([*lines, *extra.splitlines()]) + "\n")
    return len(lines) + 1


@dataclass
class Project:
    case: Case
    dir: Path
    name: str
    vars_line: int = 0
    env_line: int = 0

    def expected(self) -> str:
        tokens = {
            "<project>": str(self.dir.resolve()),
            "<name>": self.name,
            "<data>": f"{self.name}-data",
            "<n>": str(self.vars_line),
            "<e>": str(self.env_line),
        }
        pattern = self.case.says
        for token, value in tokens.items():
            pattern = pattern.replace(token, re.escape(value))
        return pattern

    def args(self) -> list[str]:
        return [a.replace("<project>", str(self.dir.resolve())) for a in self.case.command]


def make_project(root: Path, case: Case) -> Project:
    hex8 = uuid.uuid4().hex[:8]
    name = f"T{hex8}" if case.bad_name else f"tbad-{hex8}"  # a capital letter is no valid NAME
    project = Project(case, root / re.sub(r"[^a-z0-9]+", "-", case.id.lower()).strip("-"), name)
    shutil.copytree(PROJECT, project.dir, ignore=shutil.ignore_patterns(".gpu-rent"))  # a new project: no state
    project.vars_line = _edit(project.dir / "gpu-rent.vars", case.vars, case.vars_lines, tail=f"NAME={name}\n")
    project.env_line = _edit(project.dir / ".env", case.env, case.env_lines)
    if case.prepare:
        case.prepare(project.dir)
    return project


def run(project: Project) -> subprocess.CompletedProcess:
    """The command in its own session, so that one still running at the timeout can be stopped whole."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    args = [str(BIN / "gpu-rent"), *project.args()]
    with subprocess.Popen(
        args, cwd=project.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl+C: gpu-rent cancels its playbook
            try:
                out, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            err += f"\n(still running after {TIMEOUT}s: stopped)"
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# --- what the cloud holds of each NAME -------------------------------------------------------------------------------


def cloud_holds(conn, names: list[str]) -> dict[str, dict[str, list]]:
    """Per NAME, everything in the member project that is named after it (one listing of each kind for all)."""
    user = conn.current_user_id
    listed = {
        "servers": [(s.name, s.id) for s in conn.compute.servers() if s.status != "DELETED"],  # a stop ends at DELETED
        "volumes": [(v.name, v.id, v.size) for v in conn.block_storage.volumes()],
        "snapshots": [(s.name, s.id) for s in conn.block_storage.snapshots()],
        "floating_ips": [((ip.description or "").removeprefix("gpu-rent "), ip.id) for ip in conn.network.ips()],
        "networks": [(n.name, n.id) for n in conn.network.networks()],
        "routers": [(r.name, r.id) for r in conn.network.routers()],
        "security_groups": [(g.name, g.id) for g in conn.network.security_groups()],
        "keypairs": [(k.name, k.name) for k in conn.compute.keypairs()],
        "credentials": [(c.name, c.id) for c in conn.identity.application_credentials(user)],
    }

    def ours(name: str, what: str) -> bool:
        return what == name or what.startswith(f"{name}-")

    return {
        name: {kind: sorted(row for row in rows if ours(name, row[0] or "")) for kind, rows in listed.items()}
        for name in names
    }


@dataclass
class Outcome:
    project: Project
    result: subprocess.CompletedProcess
    before: dict
    after: dict | None = None


def _selected(request) -> list[Case]:
    """The cases this session runs (all of them, or those picked with -k)."""
    here = Path(__file__)
    ids = {i.callspec.params["case"].id for i in request.session.items if i.path == here and hasattr(i, "callspec")}
    return [c for c in CASES if c.id in ids]


def _destroy(name: str, root: Path) -> None:
    """Should a case have rented after all: what it made goes, through the product's own destroy."""
    project = root / f"destroy-{name}"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".gpu-rent"))
    _edit(project / "gpu-rent.vars", {}, "", tail=f"NAME={name}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GPU_RENT_"))}
    for command in (["tunnel", "--close"], ["destroy", "--i-understand-data-loss", "--no-pull"]):
        subprocess.run([str(BIN / "gpu-rent"), *command], cwd=project, env=env, capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, Outcome]:
    require_ground()
    conn = connect("ground")
    cloud = Cloud(conn)
    root = tmp_path_factory.mktemp("bad input")  # a blank in every path, as on Windows
    projects = [make_project(root, case) for case in _selected(request)]
    try:
        for p in projects:
            if p.case.in_cloud:
                p.case.in_cloud(cloud, p.name)
        names = [p.name for p in projects]
        before = cloud_holds(conn, names)
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(run, projects))
        after = cloud_holds(conn, names)
        yield {p.case.id: Outcome(p, r, before[p.name], after[p.name]) for p, r in zip(projects, results, strict=True)}
        for p in projects:
            if after[p.name] != before[p.name] and not p.case.bad_name:
                _destroy(p.name, root)
    finally:
        cloud.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_one_line_its_exit_code_and_nothing_in_the_cloud(case: Case, outcomes: dict[str, Outcome]):
    outcome = outcomes[case.id]
    result = outcome.result
    shown = f"exit {result.returncode}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert SECRET not in result.stdout + result.stderr, shown
    assert result.returncode == case.code, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    assert re.fullmatch(outcome.project.expected(), lines[0]), f"{outcome.project.expected()}\n{shown}"
    if case.code != 0:
        assert result.stdout.strip() == "", shown  # nothing planned, printed or half-done
    assert outcome.after == outcome.before, f"the cloud changed for NAME={outcome.project.name}"
    if case.check:
        case.check(outcome.project.dir, result)


def test_the_table_covers_each_kind_of_mistake():
    kinds = {c.id.split(":")[0] for c in CASES}
    assert len(CASES) >= 18 and {"vars", ".env"} <= kinds
    assert {c.code for c in CASES} == {0, 2, 4}
    assert len({c.id for c in CASES}) == len(CASES)
