#!/usr/bin/env python3
"""The stand-in `dotnet` (test ground only): installed as <DIR>/dotnet by launchtools/linux-dotnet-install.sh.

It answers what SwarmUI's scripts and ExtensionsManager ask of the real .NET CLI:
- `--list-sdks` / `--list-runtimes` / `--version`: what is installed under its own folder (sdk/<ver>,
  shared/<framework>/<ver>), printed as the real CLI prints it; launchtools/linux-path-fix.sh derives
  DOTNET_ROOT from `--list-runtimes`, launchtools/linux-build-logic.sh greps `--list-sdks` for 10.0.
- `build <proj.csproj> [--configuration X | -c X] -o <OUTDIR> [-p:A=B;TargetName=NAME]`: when the
  project's folder holds a file `standin-build-error`, the build fails as MSBuild does (its first line
  is the error, printed with the project in brackets; exit 1; no dll). Otherwise it writes
  <OUTDIR>/<TargetName, else AssemblyName, else project name>.dll and, for SwarmUI.csproj, the apphost
  <OUTDIR>/SwarmUI, which runs the stand-in server `python3 <repo>/src/standin/server.py "$@"`.
Stand-in only, for tests that count builds: each build appends a line to <install dir>/standin-builds.log
(`<UTC time> succeeded|failed <project> -> <dll>`).
"""

import re
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent  # the install dir, as the real muxer's own folder


def _versions(folder: Path) -> list[str]:
    def key(v: str) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", v)]

    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=key) if folder.is_dir() else []


def list_sdks() -> None:
    for v in _versions(ROOT / "sdk"):
        print(f"{v} [{ROOT / 'sdk'}]")


def list_runtimes() -> None:
    shared = ROOT / "shared"
    for fw in sorted(p.name for p in shared.iterdir()) if shared.is_dir() else []:
        for v in _versions(shared / fw):
            print(f"{fw} {v} [{shared / fw}]")


def fail(message: str) -> None:
    # what the real CLI says when it is handed a project it cannot use
    print(f"MSBUILD : error MSB1009: {message}")
    sys.exit(1)


def build(args: list[str]) -> int:
    start = time.monotonic()
    proj = None
    out_dir = None
    props: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "--output") and i + 1 < len(args):
            out_dir = args[i + 1]
            i += 1
        elif a in ("-c", "--configuration") and i + 1 < len(args):
            i += 1
        elif re.match(r"^(-p:|/p:|--property:|-property:)", a):
            for pair in a.split(":", 1)[1].split(";"):
                k, _, v = pair.partition("=")
                props[k] = v
        elif not a.startswith("-") and proj is None:
            proj = a
        i += 1
    if proj is None:
        fail("Project file does not exist.")
    proj_path = Path(proj).resolve()
    if not proj_path.is_file():
        fail(f"Project file does not exist.\nSwitch: {proj}")
    proj_dir = proj_path.parent
    text = proj_path.read_text(errors="replace")
    assembly = re.search(r"<AssemblyName>\s*([^<\s]+)\s*</AssemblyName>", text)
    name = props.get("TargetName") or (assembly.group(1) if assembly else proj_path.stem)
    out = Path(out_dir).resolve() if out_dir else proj_dir / "bin" / "Release" / "net8.0"
    obj = props.get("BaseIntermediateOutputPath") or str(proj_dir / "obj")
    print("  Determining projects to restore...")
    Path(obj).mkdir(parents=True, exist_ok=True)
    print("  All projects are up-to-date for restore.")
    marker = proj_dir / "standin-build-error"
    if marker.is_file():
        lines = marker.read_text(errors="replace").splitlines()
        line = f"{lines[0] if lines else 'error CS0000: stand-in build error'} [{proj_path}]"
        print(line)
        print("\nBuild FAILED.\n")
        print(line)
        print("    0 Warning(s)\n    1 Error(s)\n")
        print(f"Time Elapsed {_elapsed(start)}")
        _record("failed", proj_path, out / f"{name}.dll")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.dll").write_text(f"stand-in assembly {name}, built from {proj_path}\n")
    if proj_path.name == "SwarmUI.csproj":
        server = proj_dir / "standin" / "server.py"
        apphost = out / "SwarmUI"
        apphost.write_text(
            "#!/usr/bin/env bash\n"
            f"# Stand-in apphost built from {proj_path} by the stand-in dotnet: runs the stand-in server\n"
            f'exec python3 {shlex.quote(str(server))} "$@"\n'
        )
        apphost.chmod(0o755)
    print(f"  {name} -> {out / (name + '.dll')}")
    print("\nBuild succeeded.\n    0 Warning(s)\n    0 Error(s)\n")
    print(f"Time Elapsed {_elapsed(start)}")
    _record("succeeded", proj_path, out / f"{name}.dll")
    return 0


def _record(outcome: str, proj: Path, dll: Path) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(ROOT / "standin-builds.log", "a") as f:
        f.write(f"{stamp} {outcome} {proj} -> {dll}\n")


def _elapsed(start: float) -> str:
    s = time.monotonic() - start
    return f"{int(s // 3600):02d}:{int(s % 3600 // 60):02d}:{s % 60:05.2f}"


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--list-sdks"]:
        list_sdks()
        return 0
    if args[:1] == ["--list-runtimes"]:
        list_runtimes()
        return 0
    if args[:1] == ["--version"]:
        sdks = _versions(ROOT / "sdk")
        print(sdks[-1] if sdks else "")
        return 0 if sdks else 1
    if args[:1] == ["build"]:
        return build(args[1:])
    print(f"Could not execute because the specified command or file was not found: {' '.join(args)}", file=sys.stderr)
    print("(the stand-in dotnet knows --list-sdks, --list-runtimes, --version and build)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
