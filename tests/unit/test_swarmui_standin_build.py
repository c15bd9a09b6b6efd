"""The SwarmUI stand-in builds and lays itself out as upstream SwarmUI 062407c7 does.

The real scripts run here, in a git checkout of what publish-standin.sh publishes, with the stand-in
dotnet that launchtools/linux-dotnet-install.sh installs in $HOME/.dotnet - no network, no .NET:
- launch-linux.sh + launchtools/linux-build-logic.sh: the build order (must_rebuild -> backup,
  src/bin/extensions and the mark removed BEFORE the build; last_build written whether or not the
  build worked; the backup restored, with upstream's warning, when SwarmUI.dll is missing);
- src/standin/extensions.py: ExtensionsManager.PrepExtensions / BuildExtension;
- .gitignore and the tracked src/Extensions/put_extensions_here;
- launchtools/comfy-install-linux.sh: a real venv.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.module_file import load

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "ground" / "swarmui-standin"
# the server the apphost runs, replaced in the checkout: it prints its arguments and exits 42 once
STUB_SERVER = """import pathlib, sys
print("STUB SERVER", " ".join(sys.argv[1:]), flush=True)
flag = pathlib.Path("src/bin/stub-restarted")
if "--restart-once" in sys.argv and not flag.exists():
    flag.touch()
    sys.exit(42)
"""
# a spy found first on PATH (linux-path-fix.sh puts $SCRIPT_DIR/.dotnet first): what src/bin holds
# at the moment the build starts, then the stand-in dotnet itself
SPY = """#!/usr/bin/env bash
if [ "$1" = build ]; then
  { [ -e src/bin/must_rebuild ] && echo mark; [ -d src/bin/live_release ] && echo live;
    [ -f src/bin/live_release_backup/SwarmUI.dll ] && echo backup; [ -e src/bin/extensions ] && echo extensions;
    echo built; } > src/bin/spy
fi
exec "$HOME/.dotnet/dotnet" "$@"
"""


def git(cwd: Path, *args: str) -> str:
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
    )
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


class Checkout:
    def __init__(self, tmp: Path):
        self.root = tmp / "swarmui"
        self.home = tmp / "home"
        self.shims = tmp / "shims"
        self.home.mkdir()
        self.shims.mkdir()
        # upstream's sleeps (5 s before a backup is restored, 15 s before installing dotnet 10) are recorded
        (self.shims / "sleep").write_text(f'#!/bin/sh\necho "$@" >> {tmp}/sleeps\n')
        (self.shims / "sleep").chmod(0o755)
        self.sleeps = tmp / "sleeps"
        # the files publish-standin.sh publishes: tracked, or untracked and not ignored
        listed = git(REPO, "ls-files", "-z", "-co", "--exclude-standard", "--", str(STANDIN)).split("\0")
        for name in filter(None, listed):
            src = REPO / name
            if src.is_file():
                dest = self.root / src.relative_to(STANDIN)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)
        git(self.root, "init", "-q", "-b", "master")
        git(self.root, "add", "-f", "-A", ".")
        git(self.root, "commit", "-q", "-m", "stand-in")
        self.env = {
            "HOME": str(self.home),
            "PATH": f"{self.shims}:{os.environ['PATH']}",
            "STANDIN_CRITICAL_PAUSE": "0",
        }
        self.run("bash", "launchtools/linux-dotnet-install.sh", str(self.home / ".dotnet"))

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            raise AssertionError(f"{argv} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def launch(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("./launch-linux.sh", *args, check=False)

    def stub_server(self) -> None:
        (self.root / "src/standin/server.py").write_text(STUB_SERVER)
        self.commit("stub server")

    def commit(self, message: str) -> str:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", message)
        return git(self.root, "rev-parse", "HEAD").strip()

    def builds(self) -> list[str]:
        log = self.home / ".dotnet/standin-builds.log"
        return log.read_text().splitlines() if log.exists() else []

    def bin(self, path: str) -> Path:
        return self.root / "src/bin" / path


@pytest.fixture
def checkout(tmp_path) -> Checkout:
    return Checkout(tmp_path)


def test_dotnet_install_lays_out_sdks_and_runtimes_the_path_fix_finds(checkout):
    dotnet = checkout.home / ".dotnet/dotnet"
    sdks = checkout.run(str(dotnet), "--list-sdks").stdout.splitlines()
    assert f"10.0.100 [{checkout.home}/.dotnet/sdk]" in sdks
    assert not (checkout.root / "launchtools/dotnet-install.sh").exists()  # upstream removes its download
    # upstream's path fix finds it in $HOME/.dotnet, and its DOTNET_ROOT from --list-runtimes
    probe = "SCRIPT_DIR=$PWD; PATH=/usr/bin:/bin; source launchtools/linux-path-fix.sh; "
    probe += 'echo "$DOTNET_ROOT"; command -v dotnet'
    assert checkout.run("bash", "-c", probe).stdout.split() == [str(dotnet.parent), str(dotnet)]


def test_dotnet_build_writes_the_target_or_fails_as_msbuild(checkout):
    dotnet = str(checkout.home / ".dotnet/dotnet")
    proj = checkout.root / "p/Thing.csproj"
    proj.parent.mkdir()
    proj.write_text("<Project><PropertyGroup><AssemblyName>Other</AssemblyName></PropertyGroup></Project>")
    checkout.run(dotnet, "build", str(proj), "-c", "Release", "-o", "out1")
    assert (checkout.root / "out1/Other.dll").is_file()
    checkout.run(dotnet, "build", str(proj), "--configuration", "Release", "-o", "out2", "-p:A=b;TargetName=T-1234")
    assert (checkout.root / "out2/T-1234.dll").is_file()
    (proj.parent / "standin-build-error").write_text(
        "/x/p/Thing.cs(3,1): error CS1022: end-of-file expected\nignored\n"
    )
    failed = checkout.run(dotnet, "build", str(proj), "-c", "Release", "-o", "out3", check=False)
    assert failed.returncode == 1
    assert f"/x/p/Thing.cs(3,1): error CS1022: end-of-file expected [{proj}]" in failed.stdout.splitlines()
    assert "Build FAILED." in failed.stdout and not (checkout.root / "out3/Other.dll").exists()


def test_first_launch_builds_runs_the_apphost_and_restarts_on_42(checkout):
    checkout.stub_server()
    head = git(checkout.root, "rev-parse", "HEAD").strip()
    p = checkout.launch("--launch_mode", "none", "--port", "7801", "--restart-once")
    assert p.returncode == 0, p.stdout + p.stderr
    # launch-linux.sh: no last_build -> "git pull without building" -> must_rebuild -> build
    assert "WARNING: You did a git pull without building. Will now build for you..." in p.stdout
    assert "Rebuilding..." in p.stdout
    assert checkout.bin("live_release/SwarmUI.dll").is_file()
    assert checkout.bin("last_build").read_text().strip() == head
    assert not checkout.bin("must_rebuild").exists()
    # the apphost runs the server with launch-linux.sh's arguments; exit 42 re-execs launch-linux.sh
    assert p.stdout.count("STUB SERVER --launch_mode none --port 7801 --restart-once") == 2
    assert len(checkout.builds()) == 1  # built once: the restart found last_build == HEAD
    assert "15" not in (checkout.sleeps.read_text() if checkout.sleeps.exists() else "")  # dotnet 10 is there
    assert os.access(checkout.bin("live_release/SwarmUI"), os.X_OK)
    # --forward_restart (the first argument, as upstream) hands 42 to the caller
    checkout.bin("stub-restarted").unlink()
    assert checkout.launch("--forward_restart", "--restart-once").returncode == 42


def test_must_rebuild_moves_live_release_aside_and_drops_the_mark_and_extensions_before_building(checkout):
    checkout.stub_server()
    assert checkout.launch().returncode == 0
    spy = checkout.root / ".dotnet/dotnet"  # ignored (.dotnet/), first on linux-path-fix.sh's PATH
    spy.parent.mkdir()
    spy.write_text(SPY)
    spy.chmod(0o755)
    checkout.bin("extensions/SwarmExtensionX").mkdir(parents=True)
    checkout.bin("must_rebuild").touch()
    p = checkout.launch()
    assert p.returncode == 0, p.stdout + p.stderr
    # at the build: the mark is gone, live_release is the backup, the extension builds are gone
    assert checkout.bin("spy").read_text().split() == ["backup", "built"]
    assert checkout.bin("live_release/SwarmUI.dll").is_file()
    assert checkout.bin("live_release_backup/SwarmUI.dll").is_file()  # kept after a good build, as upstream
    assert not checkout.bin("must_rebuild").exists() and not checkout.bin("extensions").exists()


def test_a_failed_build_writes_last_build_and_restores_the_backup(checkout):
    checkout.stub_server()
    assert checkout.launch().returncode == 0
    old_dll = checkout.bin("live_release/SwarmUI.dll").read_text()
    error = "/opt/swarmui/src/Core/Program.cs(12,5): error CS1002: ; expected"
    (checkout.root / "src/standin-build-error").write_text(error + "\n")
    head = checkout.commit("broken")
    p = checkout.launch()
    assert f"{error} [{checkout.root}/src/SwarmUI.csproj]" in p.stdout
    assert "WARNING: BUILD FAILED? Restoring backup..." in p.stdout
    assert checkout.sleeps.read_text().split() == ["5"]  # upstream's pause before the restore
    assert checkout.bin("last_build").read_text().strip() == head  # written although the build failed
    assert checkout.bin("live_release/SwarmUI.dll").read_text() == old_dll
    assert not checkout.bin("live_release_backup").exists() and not checkout.bin("must_rebuild").exists()
    assert "STUB SERVER" in p.stdout and p.returncode == 0  # the old binary runs the new checkout
    assert [line.split()[1] for line in checkout.builds()] == ["succeeded", "failed"]
    # the next start sees last_build == HEAD and builds nothing
    assert checkout.launch().returncode == 0 and len(checkout.builds()) == 2


def test_a_failed_first_build_leaves_nothing_to_run(checkout):
    (checkout.root / "src/standin-build-error").write_text("src/X.cs(1,1): error CS1002: ; expected\n")
    checkout.commit("broken")
    p = checkout.launch()
    assert p.returncode == 127 and "BUILD FAILED? Restoring" not in p.stdout  # no backup: nothing restored
    assert not checkout.bin("live_release/SwarmUI.dll").exists()
    assert checkout.bin("last_build").exists()


class Recorder:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def debug(self, message: str) -> None:
        self.lines.append(("Debug", message))

    def critical_load_error(self, message: str) -> None:
        self.lines += [("Error", "!!!!"), ("Error", message), ("Error", "!!!!")]


def load_extensions_module(checkout: Checkout):
    return load("standin_extensions", checkout.root / "src/standin/extensions.py")


def extension(checkout: Checkout, name: str, *, broken: bool = False, repo: bool = True) -> Path:
    folder = checkout.root / "src/Extensions" / name
    folder.mkdir(parents=True)
    (folder / f"{name}.cs").write_text(f"public class {name} : SwarmUI.Core.Extension {{ }}\n")
    if broken:
        (folder / "standin-build-error").write_text(f"{folder}/{name}.cs(1,1): error CS1513: }} expected\n")
    if repo:
        git(folder, "init", "-q")
        git(folder, "add", "-A")
        git(folder, "commit", "-q", "-m", name)
    return folder


def test_extensions_build_one_by_one_at_start_and_a_failure_is_logged(checkout, monkeypatch):
    for key, value in checkout.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", f"{checkout.home / '.dotnet'}:{os.environ['PATH']}")  # as linux-path-fix.sh
    extensions = load_extensions_module(checkout)
    good = extension(checkout, "Good")
    extension(checkout, "Bad", broken=True)  # built first (alphabetical here), fails
    extension(checkout, "Plain", repo=False)  # no repo of its own: git finds the SwarmUI checkout's HEAD
    extension(checkout, "Off.disable")
    extension(checkout, "Settings")
    gone = extension(checkout, "Old.delete")
    (checkout.root / "Data").mkdir()
    (checkout.root / "Data/Settings.fds").write_text(
        "IsInstalled: true\nDisabledExtensions:\n- Settings\nLaunchMode: none\n"
    )
    log = Recorder()
    extensions.prep_extensions(checkout.root, log)

    good_head = git(good, "rev-parse", "HEAD")[:8]
    swarm_head = git(checkout.root, "rev-parse", "HEAD")[:8]
    out = checkout.bin("extensions")
    assert (out / f"SwarmExtensionGood/SwarmExtensionGood-{good_head}.dll").is_file()
    assert (out / f"SwarmExtensionPlain/SwarmExtensionPlain-{swarm_head}.dll").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["SwarmExtensionGood", "SwarmExtensionPlain"]
    assert not gone.exists()
    errors = [m for level, m in log.lines if level == "Error" and m != "!!!!"]
    assert len(errors) == 1
    proj = "src/Extensions/Bad/SwarmAutoGenExtensionProjectFile.csproj"
    head, _, output = errors[0].partition("\n")
    assert head == f"Build of extension project {proj} failed! Raw output:"
    assert (
        f"{checkout.root}/src/Extensions/Bad/Bad.cs(1,1): error CS1513: }} expected [{checkout.root / proj}]" in output
    )
    assert not (checkout.root / proj).exists()  # the reference project is removed after the builds
    # the dotnet build line upstream runs, for one extension
    build = [line for line in checkout.builds() if "Good" in line]
    assert build == [build[0]] and build[0].split()[1] == "succeeded"

    # the next start builds nothing new; a new commit of the extension is a new dll
    log = Recorder()
    extensions.prep_extensions(checkout.root, log)
    assert (
        "Debug",
        "Don't need to rebuild extension src/Extensions/Good/SwarmAutoGenExtensionProjectFile.csproj, already built.",
    ) in log.lines
    (good / "more.cs").write_text("// more\n")
    git(good, "add", "-A")
    git(good, "commit", "-q", "-m", "more")
    extensions.prep_extensions(checkout.root, Recorder())
    assert (out / f"SwarmExtensionGood/SwarmExtensionGood-{git(good, 'rev-parse', 'HEAD')[:8]}.dll").is_file()


def test_extensions_use_their_own_csproj_and_report_a_missing_dotnet(checkout, monkeypatch):
    monkeypatch.setenv("PATH", f"{checkout.home / '.dotnet'}:{os.environ['PATH']}")
    extensions = load_extensions_module(checkout)
    folder = extension(checkout, "Own")
    (folder / "OwnExtension.csproj").write_text(
        "<Project><PropertyGroup><AssemblyName>X</AssemblyName></PropertyGroup></Project>"
    )
    extensions.prep_extensions(checkout.root, Recorder())
    assert f"{folder / 'OwnExtension.csproj'} ->" in checkout.builds()[-1]
    monkeypatch.setattr(extensions, "find_dotnet", lambda: str(checkout.root / "no-dotnet"))
    shutil.rmtree(checkout.bin("extensions"))
    log = Recorder()
    extensions.prep_extensions(checkout.root, log)
    errors = [m for level, m in log.lines if level == "Error" and m != "!!!!"]
    assert len(errors) == 1 and errors[0].startswith("Failed to build extension in folder SwarmUI/src/Extensions/Own: ")


def test_put_extensions_here_is_tracked_while_the_folder_is_ignored(checkout):
    tracked = "src/Extensions/put_extensions_here"
    assert git(checkout.root, "ls-files", tracked).strip() == tracked
    assert git(REPO, "ls-files", f"ground/swarmui-standin/{tracked}").strip()  # the project tracks it too
    # upstream's .gitignore: what SwarmUI and its installers write is ignored
    ignored = ["src/Extensions/Mine/x.cs", "Data/x", "Models/x", "Output/x", "dlbackend/x", "src/bin/x", "src/obj/x"]
    ignored += ["venv/x", ".dotnet/x", "launchtools/dotnet-install.sh", "a/__pycache__/x.pyc"]
    checked = subprocess.run(["git", "check-ignore", *ignored], cwd=checkout.root, capture_output=True, text=True)
    assert checked.stdout.split() == ignored
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", tracked], cwd=checkout.root).returncode == 0
    csproj = (checkout.root / "src/SwarmUI.csproj").read_text()
    assert '<Compile Remove="Extensions/**" />' in csproj and "<Version>0.9.8.2</Version>" in csproj


def test_a_branch_checkout_over_an_extensions_folder_used_before_is_refused(checkout, tmp_path):
    """The trap of issue 13 item 1, reproduced by the stand-in: the data volume's put_extensions_here
    blocks `git checkout --track -b master origin/master` (what ansible.builtin.git runs for a branch)."""
    bare = tmp_path / "SwarmUI.git"
    git(tmp_path, "clone", "-q", "--bare", str(checkout.root), str(bare))
    fresh = tmp_path / "fresh"
    git(tmp_path, "init", "-q", str(fresh))
    git(fresh, "remote", "add", "origin", str(bare))
    git(fresh, "fetch", "-q", "origin")
    (fresh / "src/Extensions").mkdir(parents=True)
    shutil.copy(checkout.root / "src/Extensions/put_extensions_here", fresh / "src/Extensions")
    p = subprocess.run(
        ["git", "checkout", "--track", "-b", "master", "origin/master"], cwd=fresh, capture_output=True, text=True
    )
    assert p.returncode != 0 and "src/Extensions/put_extensions_here" in p.stderr


def test_everything_the_stand_in_writes_is_ignored(checkout):
    checkout.stub_server()
    assert checkout.launch().returncode == 0
    extension(checkout, "Some")
    prep = "import sys; sys.path.insert(0, 'src/standin'); import extensions; extensions.prep_extensions('.', log)"
    log = "class log:\n    debug = critical_load_error = print\n"
    checkout.run(sys.executable, "-c", log + prep)  # the dotnet found in $HOME/.dotnet, PATH lacking it
    assert checkout.bin("extensions/SwarmExtensionSome").is_dir()
    assert git(checkout.root, "status", "--porcelain") == ""


def test_comfy_install_makes_a_real_venv_as_upstream(checkout):
    p = checkout.run("bash", "launchtools/comfy-install-linux.sh", "nv")
    assert p.stdout.splitlines()[-1] == "Installation completed for nv GPU."
    comfy = checkout.root / "dlbackend/ComfyUI"
    assert (comfy / "main.py").read_text() == (checkout.root / "src/standin/comfyui.py").read_text()
    python = comfy / "venv/bin/python"
    assert checkout.run(str(python), "-c", "import sys; print(sys.prefix)").stdout.strip() == str(comfy / "venv")
    assert checkout.run(str(python), "-m", "pip", "--version").returncode == 0  # ensurepip, as upstream
    # the first of python3.11, python3.12, python3.10 found, as upstream
    first = next(
        shutil.which(v, path=checkout.env["PATH"]) for v in ("python3.11", "python3.12", "python3.10", "python3")
    )
    version = "import sys; print(sys.version)"
    assert checkout.run(str(python), "-c", version).stdout == checkout.run(first, "-c", version).stdout
    assert git(checkout.root, "status", "--porcelain") == ""  # all ignored (/dlbackend)
    # a second run over an existing dlbackend/ComfyUI mends nothing and still "completes", as upstream
    (comfy / "main.py").unlink()
    again = checkout.run("bash", "launchtools/comfy-install-linux.sh", "nv")
    assert "fatal: destination path 'ComfyUI' already exists and is not an empty directory." in again.stderr
    assert "Installation completed for nv GPU." in again.stdout and not (comfy / "main.py").exists()
    assert checkout.run("bash", "launchtools/comfy-install-linux.sh", check=False).returncode == 1


def test_publish_standin_makes_the_ground_repositories(tmp_path):
    env = dict(os.environ, GROUND_DIR=str(tmp_path))
    publish = [str(REPO / "ground/targethost/publish-standin.sh")]
    (tmp_path / "git/ATest.git").mkdir(parents=True)  # a test's repository beside them stays
    subprocess.run(publish, env=env, check=True, capture_output=True)
    swarm = tmp_path / "git/SwarmUI.git"
    refs = dict(line.split()[::-1] for line in git(swarm, "show-ref").splitlines())
    assert set(refs) == {"refs/heads/master", "refs/tags/0.9.8.2-standin", "refs/tags/broken-build-standin"}
    assert refs["refs/heads/master"] == refs["refs/tags/0.9.8.2-standin"]
    files = git(swarm, "ls-tree", "-r", "--name-only", "master").split()
    assert "src/Extensions/put_extensions_here" in files and "launchtools/linux-dotnet-install.sh" in files
    assert git(swarm, "diff", "--name-status", "master", "broken-build-standin").split() == [
        "A",
        "src/standin-build-error",
    ]
    assert "error CS" in git(swarm, "show", "broken-build-standin:src/standin-build-error")
    assert git(tmp_path / "git/StandinExtension.git", "ls-tree", "--name-only", "master").split() == [
        "StandinExtension.cs"
    ]
    broken = git(tmp_path / "git/StandinBrokenExtension.git", "ls-tree", "--name-only", "master").split()
    assert broken == ["StandinBrokenExtension.cs", "standin-build-error"]
    # publishing an unchanged tree again gives the same commits
    subprocess.run(publish, env=env, check=True, capture_output=True)
    assert git(swarm, "rev-parse", "0.9.8.2-standin").strip() == refs["refs/tags/0.9.8.2-standin"]
    assert (tmp_path / "git/ATest.git").is_dir()
