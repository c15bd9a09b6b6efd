"""The idle-killer's last breath: a poweroff or halt from inside the guest becomes a delete of this server.

`train.py && sudo poweroff` is a common habit, and a server shut off bills in full on Selectel (only a
preempted one stops billing). The unit gpu-rent-last-breath.service is started at boot and does nothing;
systemd stops it at shutdown before the network (it is ordered after network-online.target), and its
stop runs `python3 -m on_vm.last_breath`, which:

- reads what the shutdown is from systemd's queued jobs: a reboot (or kexec) stays a reboot;
- asks Nova for this server with the killer's own credential (the proof's GET): a stop, shelve or
  delete the cloud is carrying out shows as Nova's task or status, and an ACPI power button (a stop
  below Nova) as systemd-logind's "Power key pressed": both are the cloud's, not the guest's (a
  preemption must stay restorable, the watchdog brings it back);
- otherwise syncs the disks and deletes the server and then its floating IP, as the killer does at its
  deadline, its last words on the boot volume naming the poweroff (the next `gpu-rent up` tells them).
  The disks stay. Its unit is ordered before SwarmUI and the LLM runtime, so it stops after them.

Standard library only, like the killer it shares its config and its acting with (idle_killer).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from . import paths
from .idle_killer import (
    CRIT,
    INFO,
    WARNING,
    Config,
    CredentialRefused,
    Unreachable,
    authenticate,
    delete_self,
    not_this_server,
    show_own_server,
    take_handoff,
    with_retries,
)

# what a guest's own shutdown leaves queued in systemd, by the target its job starts; a reboot wins
REBOOTS = ("reboot.target", "kexec.target", "soft-reboot.target")
POWEROFFS = ("poweroff.target", "halt.target")
REASON = "the guest powered itself off (a poweroff or halt from inside the VM): deleted, as a server shut off bills"


def shutdown_kind(jobs: str) -> str | None:
    """reboot, poweroff or None (no shutdown queued: the unit was stopped alone), from `systemctl list-jobs`."""
    units = {word for line in jobs.splitlines() for word in line.split()[1:2]}
    if units & set(REBOOTS):
        return "reboot"
    if units & set(POWEROFFS):
        return "poweroff"
    return None


def queued_jobs() -> str:
    try:
        return subprocess.run(["systemctl", "list-jobs", "--no-legend", "--plain"], capture_output=True, text=True,
                              timeout=10).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""


def the_clouds_doing(server: dict, logind: str) -> str | None:
    """Why the shutdown is the cloud's (a stop, a shelve, a delete Nova is carrying out, or the hypervisor's
    ACPI power button, which systemd-logind logs as a power key); None: the guest's own."""
    task = server.get("OS-EXT-STS:task_state")
    if task or server.get("status") != "ACTIVE":
        return f"Nova shows it {server.get('status')} (task {task or '-'})"
    if "Power key pressed" in logind:  # a stop below Nova (host maintenance): the VM may come back
        return "the power button was pressed (systemd-logind), not a poweroff inside the guest"
    return None


def logind_lines() -> str:
    """This boot's systemd-logind journal, where an ACPI power button shows ("Power key pressed short.")."""
    try:
        return subprocess.run(["journalctl", "-b", "-u", "systemd-logind", "-o", "cat", "--no-pager", "-n", "200"],
                              capture_output=True, text=True, timeout=10).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""


def last_breath(cfg: Config, jobs: str, say=print, logind: str = "") -> str:
    """What was done, in one line (also said to the journal). jobs: systemd's queued jobs; logind: its log."""
    kind = shutdown_kind(jobs)
    if kind != "poweroff":
        said = f"{INFO}last breath: {kind or 'no shutdown queued'}, nothing to delete"
    elif stranger := not_this_server(cfg):
        said = f"{WARNING}last breath: not deleted: {stranger}"
    else:
        try:
            login = with_retries(lambda: authenticate(cfg), tries=2, pause=0.5)
            _, server = with_retries(lambda: show_own_server(cfg, login), tries=2, pause=0.5)
        except (CredentialRefused, Unreachable) as e:
            said = f"{CRIT}last breath: this poweroff leaves the server SHUT OFF and billing: {e}"
        else:
            cloud = the_clouds_doing(server, logind)
            if cloud:
                said = f"{INFO}last breath: the cloud is stopping it ({cloud}): not deleted"
            else:
                # what the guest wrote last (a checkpoint, an output) reaches the disks before Nova destroys it
                os.sync()
                acted = delete_self(cfg, {}, time.time(), say, REASON, login=login)["acted"]
                loud = CRIT if acted.startswith(("CREDENTIAL REFUSED", "delete failed")) else WARNING
                said = f"{loud}last breath: {REASON}; {acted}"
    say(said)
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-rent-last-breath", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=paths.CONFIG_FILE)
    args = parser.parse_args(argv)
    try:
        cfg = Config.load(Path(args.config))
        cfg = take_handoff(Path(args.config), cfg, time.time())  # a poweroff before the first tick of a new server
    except (OSError, ValueError, TypeError) as e:
        print(f"{CRIT}last breath: idle-killer config {args.config} unusable, nothing deletes this VM: {e}")
        return 2
    last_breath(cfg, queued_jobs(), logind=logind_lines())
    return 0


if __name__ == "__main__":
    sys.exit(main())
