"""pip, as SwarmUI's DoLibFixes calls it, without the network: `<venv python> -s -m pip install <req>`.

Test ground only. backends.py runs the venv's own python with upstream's arguments
(ComfyUISelfStartBackend.DoPythonCall "-s -m pip install <pipName>") and this folder on PYTHONPATH, so
`-m pip` finds this module before the venv's pip: the command line, the process and its parent are
upstream's, only what it does differs. It takes STANDIN_PIP_INSTALL_SECONDS (0.05 s) per call, as a
download and install would, then installs what pip leaves and SwarmUI reads back: the
`<normalized name>-<version>.dist-info` folder in the venv's site-packages (DoLibFixes takes a
package as present from a folder named `<libFolder>-...`, and its version from that folder's name).
Written whole at the end: a pip killed meanwhile installs nothing, and the next start tries again.

- `install NAME`: version 0.0.0+standin (a stand-in cannot know the index's latest; local version
  `+standin` tells it apart), or nothing when NAME is installed ("Requirement already satisfied");
  `install NAME==V` / `>=V` / `<=V` / `~=V`: version V, replacing an installed one, as pip upgrades.
- `uninstall -y NAME`: its dist-info folders removed.
- Outside a venv it installs nothing: pip refuses (exit 1) the interpreter of a Debian/Ubuntu host,
  which marks it EXTERNALLY-MANAGED (PEP 668); elsewhere it fails as pip without the network does.
- A requirement that is a URL or path (`git+https://...`, a .whl) fails as pip without the network.
"""

import os
import re
import shutil
import sys
import sysconfig
import time

SECONDS = float(os.environ.get("STANDIN_PIP_INSTALL_SECONDS", "0.05"))
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:(==|>=|<=|~=)\s*([A-Za-z0-9.+!_-]+))?$")
BARE_VERSION = "0.0.0+standin"


def normalized(name: str) -> str:
    """The distribution name as a dist-info folder is named (binary distribution format, PEP 491/503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def installed(site: str, name: str) -> list[str]:
    prefix = normalized(name)
    return [d for d in os.listdir(site) if d.endswith(".dist-info") and normalized(d.split("-", 1)[0]) == prefix]


def offline_failure(requirement: str) -> int:
    print(f"ERROR: Could not find a version that satisfies the requirement {requirement} (from versions: none)",
          file=sys.stderr)  # fmt: skip
    print(f"ERROR: No matching distribution found for {requirement}", file=sys.stderr)
    return 1


def refused_outside_venv(requirement: str) -> int | None:
    if sys.prefix != sys.base_prefix:
        return None
    if os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")):
        print("error: externally-managed-environment", file=sys.stderr)
        print("", file=sys.stderr)
        print("× This environment is externally managed", file=sys.stderr)
        return 1
    return offline_failure(requirement)


def write_dist_info(site: str, name: str, version: str) -> None:
    """What pip leaves for SwarmUI to read: the dist-info folder, made aside and renamed into place."""
    folder = f"{normalized(name)}-{version}.dist-info"
    temp = os.path.join(site, f".{folder}.{os.getpid()}.tmp")
    os.makedirs(temp)
    files = {"METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", "INSTALLER": "pip\n"}
    files["RECORD"] = "".join(f"{folder}/{f},,\n" for f in [*files, "RECORD"])
    for file, text in files.items():
        with open(os.path.join(temp, file), "w") as out:
            out.write(text)
    for old in installed(site, name):
        shutil.rmtree(os.path.join(site, old), ignore_errors=True)
    try:
        os.rename(temp, os.path.join(site, folder))
    except OSError:  # another pip put the same version there meanwhile
        shutil.rmtree(temp, ignore_errors=True)


def install(site: str, requirements: list[str]) -> int:
    print(f"Collecting {' '.join(requirements)}", flush=True)
    time.sleep(SECONDS)
    done = []
    for requirement in requirements:
        match = REQUIREMENT.match(requirement)
        if not match:
            return offline_failure(requirement)
        name, _, version = match.groups()
        present = installed(site, name)
        if version is None and present:
            print(f"Requirement already satisfied: {name} in {site}")
            continue
        write_dist_info(site, name, version or BARE_VERSION)
        done.append(f"{name}-{version or BARE_VERSION}")
    if done:
        print(f"Successfully installed {' '.join(done)}")
    return 0


def uninstall(site: str, names: list[str]) -> int:
    for name in names:
        for old in installed(site, name):
            shutil.rmtree(os.path.join(site, old), ignore_errors=True)
            print(f"Successfully uninstalled {old.removesuffix('.dist-info')}")
    return 0


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    names = [a for a in rest if not a.startswith("-")]
    if command not in ("install", "uninstall") or not names:
        print(f"ERROR: the pip stand-in runs `install REQ...` and `uninstall -y NAME...`, not {argv}", file=sys.stderr)
        return 2
    refused = refused_outside_venv(names[0])
    if refused is not None:
        return refused
    site = sysconfig.get_path("purelib")
    return install(site, names) if command == "install" else uninstall(site, names)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
