"""The VM's programs as gpu-rent up to 6ebc3b5 left them on a boot volume: flat files, not the on_vm package.

56712be moved them into gpu_rent/on_vm, and the roles now install that as the package on_vm; a warm up on
a kept boot volume must converge from what the older gpu-rent left. Read from that commit itself (git
show), so what is laid on a host is what ran then: the killer's three files and the unit running them,
the seed role's fetch.py beside progress_line.py, the llm_runtime role's llm_pull.py and ollama_name.py.
"""

from __future__ import annotations

import io
import subprocess
import tarfile

import jinja2

from tests.groundkit import REPO, ssh_argv

FLAT = "6ebc3b5"  # the last commit with flat VM programs
PROGRAM_DIR = "/usr/local/lib/gpu-rent"
KILLER_DIR = f"{PROGRAM_DIR}/idle-killer"  # that commit's idle_killer_program_dir
KILLER_UNIT = "/etc/systemd/system/gpu-rent-idle-killer.service"
SCRIPTS = {  # that commit's seed and llm_runtime roles copied these beside each other
    "fetch.py": "roles/seed/files/fetch.py",
    "progress_line.py": "gpu_rent/progress_line.py",
    "llm_pull.py": "roles/llm_runtime/files/llm_pull.py",
    "ollama_name.py": "gpu_rent/ollama_name.py",
}


def show(path: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), "show", f"{FLAT}:{path}"], capture_output=True, text=True)
    assert done.returncode == 0, f"the flat layout is read from commit {FLAT} of this checkout: {done.stderr}"
    return done.stdout


def killer(config_file: str, tick_seconds: int) -> dict[str, str]:
    """The killer's files and its unit, rendered as that commit's role rendered it."""
    unit = jinja2.Template(
        show("roles/idle_killer/templates/gpu-rent-idle-killer.service.j2"), undefined=jinja2.StrictUndefined
    ).render(ansible_managed="Ansible managed", idle_killer_program_dir=KILLER_DIR,
             idle_killer_config_file=config_file, idle_killer_tick_seconds=tick_seconds)  # fmt: skip
    names = ("idle_killer.py", "idle_look.py", "idle_decision.py")
    return {f"{KILLER_DIR}/{name}": show(f"gpu_rent/{name}") for name in names} | {KILLER_UNIT: unit + "\n"}


def scripts() -> dict[str, str]:
    return {f"{PROGRAM_DIR}/{name}": show(path) for name, path in SCRIPTS.items()}


def lay(address: str, files: dict[str, str]) -> None:
    """The files on the host as root made them (0644, folders 0755), in one SSH round trip."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    done = subprocess.run([*ssh_argv(), f"root@{address}", "tar -x --no-same-owner -C /"], input=archive.getvalue(),
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
