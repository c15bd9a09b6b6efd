"""Extensions built one by one at every start, as upstream src/Core/ExtensionsManager.cs does.

Upstream (062407c7) `PrepExtensions` runs before the web server listens (src/Core/Program.cs calls
`Extensions.PrepExtensions().Wait()` long before "Launching server..."): every folder under
src/Extensions - but `*.delete` (deleted), `*.disable` and those in Settings' DisabledExtensions -
is built by `BuildExtension` with `dotnet build`, one after another, into
src/bin/extensions/SwarmExtension<Folder>/SwarmExtension<Folder>-<8 of its git HEAD>.dll. A build
that leaves no dll is logged with `Logs.CriticalLoadError` and the start goes on.

The stand-in calls the stand-in `dotnet` (launchtools/linux-dotnet-install.sh installs it) exactly
as upstream calls the real one; the server calls `prep_extensions(ROOT, log)` before it listens,
`log` being logs.log (src/Utils/Logs.cs): `log.debug(message)`, `log.critical_load_error(message)`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

# ExtensionsManager.ReferenceCsproj: written for an extension that has no .csproj of its own
REFERENCE_CSPROJ = """<Project Sdk="Microsoft.NET.Sdk.Web">
    <PropertyGroup>
        <AssemblyName>MyUnconfiguredExtension</AssemblyName>
    </PropertyGroup>
    <Import Project="../../SwarmUI.extension.props" />
</Project>"""
AUTOGEN_NAME = "SwarmAutoGenExtensionProjectFile.csproj"


def _run(argv: list[str], cwd: Path) -> str:
    """src/Utils/Utilities.cs QuickRunProcess: stdout, then stderr after a newline when not blank, trimmed."""
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace")
    result = p.stdout
    if p.stderr.strip():
        result = f"{p.stdout}\n{p.stderr}"
    return result.strip()


def _git_head(folder: Path) -> str:
    """Utilities.RunGitProcess("rev-parse HEAD", folder), with its safe.directory retry."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")

    def git(*args: str) -> str:
        p = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, env=env, errors="replace")
        out = p.stdout if not p.stderr.strip() else f"{p.stdout}\n{p.stderr}"
        return out.strip()

    result = git("rev-parse", "HEAD")
    if "detected dubious ownership in repository at" in result and "git config --global --add safe.directory" in result:
        git("config", "--global", "--add", "safe.directory", str(folder))
        result = git("rev-parse", "HEAD")
    return result


def find_dotnet() -> str:
    """The `dotnet` upstream starts by name: the first on PATH (launchtools/linux-path-fix.sh put
    $HOME/.dotnet there); then DOTNET_ROOT's, then the swarmui role's /root/.dotnet."""
    found = shutil.which("dotnet")
    if found:
        return found
    for root in (os.environ.get("DOTNET_ROOT"), str(Path.home() / ".dotnet"), "/root/.dotnet"):
        if root and os.access(Path(root) / "dotnet", os.X_OK):
            return str(Path(root) / "dotnet")
    return "dotnet"  # not found: starting it fails as upstream's Process.Start does


def disabled_extensions(root: Path) -> list[str]:
    """Settings.DisabledExtensions from Data/Settings.fds: an FDS list (`DisabledExtensions:` then `- Name` lines)."""
    settings = root / "Data" / "Settings.fds"
    if not settings.is_file():
        return []
    names: list[str] = []
    inside = False
    for line in settings.read_text(errors="replace").splitlines():
        if re.match(r"^DisabledExtensions:\s*$", line):
            inside = True
            continue
        if inside:
            item = re.match(r"^\s*- (.*)$", line)
            if not item:
                break
            names.append(item.group(1).strip())
    return names


def build_extension(root: Path, folder: str, proj_file: str, log) -> bool:
    """ExtensionsManager.BuildExtension (Release mode; the stand-in has no dev mode). True when the dll is there."""
    dll_name = f"SwarmExtension{folder.rsplit('/', 1)[-1]}"
    full_folder = root / folder
    head = _git_head(full_folder)
    head = head[0:8] if len(head) >= 8 and head[0:8].isascii() and head[0:8].isalnum() else "unknown"
    target = root / "src/bin/extensions" / dll_name / f"{dll_name}-{head}.dll"
    # bin/obj shouldn't exist but sometimes are accidentally created (upstream's comment): removed
    for sub in ("bin", "obj"):
        if (full_folder / sub).is_dir():
            shutil.rmtree(full_folder / sub)
    if target.is_file():
        log.debug(f"Don't need to rebuild extension {proj_file}, already built.")
        return True
    log.debug(f"Building extension project: {proj_file}...")
    obj = root / "src/obj/extensions" / dll_name
    build_param = f"-p:BaseIntermediateOutputPath={obj}/;TargetName={dll_name}-{head}"
    out_dir = f"{root / 'src/bin/extensions' / dll_name}/"
    argv = [find_dotnet(), "build", str(root / proj_file), "-c", "Release", "-o", out_dir, build_param]
    output = _run(argv, full_folder)
    if not target.is_file():
        log.critical_load_error(f"Build of extension project {proj_file} failed! Raw output:\n{output}")
        return False
    log.debug(f"Successful build output for extension project {proj_file}:\n{output}")
    return True


def prep_extensions(root: Path, log, disabled: Iterable[str] | None = None) -> None:
    """ExtensionsManager.PrepExtensions for src/Extensions/* (builtins are part of the core here).

    `disabled` is Settings.DisabledExtensions; by default read from root/Data/Settings.fds."""
    root = Path(root).resolve()
    ext_root = root / "src/Extensions"
    # "src/" + path after "/src/": folders as upstream names them, e.g. src/Extensions/MyExt
    extras = sorted(f"src/Extensions/{d.name}" for d in ext_root.iterdir() if d.is_dir()) if ext_root.is_dir() else []
    delete_me = [e for e in extras if e.endswith(".delete")]
    extras = [e for e in extras if not e.endswith(".delete") and not e.endswith(".disable")]
    disabled_folders = set(disabled_extensions(root) if disabled is None else disabled)
    extras = [e for e in extras if e.rsplit("/", 1)[-1] not in disabled_folders]
    for deletable in delete_me:
        try:
            shutil.rmtree(root / deletable)
        except OSError as e:
            log.critical_load_error(
                f"Failed to delete extension folder SwarmUI/{deletable}: {e}, you will need to remove it manually"
            )
    auto_genned: list[Path] = []
    for ext_dir in extras:
        try:
            projs = sorted(p.name for p in (root / ext_dir).glob("*.csproj") if p.is_file())
            # upstream orders by whether the path contains "extension"; every path under src/Extensions does
            proj_file = f"{ext_dir}/{projs[0]}" if projs else None
            if proj_file is None:
                proj_file = f"{ext_dir}/{AUTOGEN_NAME}"
                auto_genned.append(root / proj_file)
                (root / proj_file).write_text(REFERENCE_CSPROJ)
            build_extension(root, ext_dir, proj_file, log)
        except Exception as e:  # upstream catches everything here and goes on
            log.critical_load_error(f"Failed to build extension in folder SwarmUI/{ext_dir}: {e}")
    for auto_gen in auto_genned:
        with contextlib.suppress(OSError):
            auto_gen.unlink()
