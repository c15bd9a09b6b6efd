"""The idle-killer on the VM: each tick looks at SwarmUI and the disk, decides, records why, and
deletes this server and then its floating IP through the OpenStack API when it has been idle
long enough.

Runs on the VM from a systemd timer as `python3 -m on_vm.idle_killer` (the idle_killer role installs
the on_vm package with it: idle_look, what it looks at, idle_decision, what it makes of that, and
paths), so it is standard library only. Commands:

  tick    look, decide (idle_decision.decide), write the status file and one journal line; delete
          the server when the decision says so
  check   prove the credential: log in with it and GET this server through the endpoint, region and path
          its DELETE will use (Nova, not Keystone, enforces an access rule), and record what that proved
  arm     write the config read from stdin (root only) when it differs, then check; --look UNIT: then
          start UNIT for the first look. The role arms in this one command: one SSH round trip, not five
  busy    the generations a restart of SwarmUI would cut (its counters, each ComfyUI's queue), read as a
          tick reads them (idle_decision.queued_work); --wait SECONDS: until none run. Exit 0 none, 3 some
          (named on stdout); with no config, its defaults (the swarmui role asks before it restarts SwarmUI)
  first-boot  write the config read from stdin (root only) unless one is there: cloud-init's installer at a
          server's first boot from the image (plugins/module_utils/gpu_rent_first_boot.py); it names no server
          and holds no credential, which the first tick takes from the metadata service (take_handoff)

What a tick looks at (idle_look): SwarmUI's GetGlobalStatus (every session's counters) and ListBackends (our
self-start ComfyUI backends, one per GPU) in one session kept from tick to tick; the queue of every
ComfyUI process in swarmui.service's cgroup, at the port its command line names (the port moves at
each launch); partial downloads under Models; the seeding lock, the hold, and the data volume's
mount and marker; each GPU's utilisation (nvidia-smi); the newest key typed in a terminal (the
atime of /dev/pts/N, as `w` reads it); the LLM runtime's own activity (LLM_RUNTIME: Ollama's loaded
models, llama.cpp's slots); the user's KEEP_ALIVE_COMMAND. SwarmUI's errors are read from their HTTP
401/400 bodies and named by error_id.

The config (/root/.gpu-rent/idle-killer.json, 0600) holds the credential; the status file holds
no secret, and is what `gpu-rent status` reads over SSH.

One file past 500 lines on purpose: it is the program the timer runs on the VM, copied there with
its few siblings only; the config, the acting (Keystone, Nova, Neutron by urllib) and the commands
share one Config and one status file and are read together when a VM went (or did not).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import http.client
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from . import handoff, paths
from .idle_decision import (
    DELETE,
    OUR_START_SCRIPT,
    Decision,
    Limits,
    Memory,
    Observation,
    backends_line,
    decide,
    queued_work,
    silent_comfy,
)
from .idle_look import (
    HTTP_TIMEOUT,
    SwarmLook,
    comfy_ports_of,
    comfy_queues,
    data_volume_problem,
    fresh_downloads,
    in_a_child,
    installs_of,
    last_terminal_input,
    llm_look,
    read_gpus,
    read_hold,
    read_time,
    run_keep_alive,
    swarm_look,
    unit_commands,
    unit_starting_since,
    why,
)

# journald reads a "<N>" prefix as the line's priority: 2 crit, 4 warning, 6 info
CRIT, WARNING, INFO = "<2>", "<4>", "<6>"
GPU_FIELDS = ("index", "utilization", "memory_used")  # the status file's names of nvidia-smi's columns
RETRY_PAUSE = 2.0  # seconds before the second try of a transient failure, doubled for the third


@dataclass(frozen=True)
class Config:
    server_id: str
    auth_url: str  # Keystone v3, e.g. https://cloud.api.selcloud.ru/identity/v3
    credential_id: str | None  # the application credential; None: armed blind (no cloud given)
    credential_secret: str | None = field(repr=False)
    region_name: str | None = None
    interface: str = "public"
    floating_ip_id: str | None = None  # deleted after the server; None: kept (KEEP_FLOATING_IP, or not known)
    idle_seconds: float = 1800
    grace_seconds: float = 900
    cap_seconds: float = 3600
    # empty: no SwarmUI to ask (the first boot's config, before the arm installs it): nor its ComfyUIs
    swarmui_url: str = "http://127.0.0.1:7801"
    # gpu-rent's backends in ListBackends: self-start ComfyUI from this script (roles/swarmui)
    comfy_start_script: str = OUR_START_SCRIPT
    # ComfyUI's own queues (the Comfy Workflow tab can bypass SwarmUI's counters) are read at the
    # ports of the ComfyUI processes in this unit's cgroup; comfy_ports, when given, instead.
    swarmui_unit: str = "swarmui.service"
    cgroup_root: str = "/sys/fs/cgroup"
    proc_root: str = "/proc"
    comfy_ports: tuple[int, ...] = ()
    # the data volume SwarmUI's folders are bound from, and the file that says gpu-rent made it;
    # an empty data_mount: not checked
    data_mount: str = paths.DATA_MOUNT
    data_marker: str = ".gpu-rent-ready"
    # the data volume's boot-time grow (roles/data_volume's gpu-rent-grow-data.service.j2), asked about only while
    # the volume is not mounted; empty: not asked
    grow_unit: str = "gpu-rent-grow-data.service"
    models_dirs: tuple[str, ...] = (f"{paths.DATA_MOUNT}/Models",)
    hold_file: str = paths.HOLD_FILE
    seeding_lock: str = paths.SEEDING_LOCK
    status_file: str = paths.STATUS_FILE
    # on the boot volume, which outlives the server: the next up tells why the VM before went
    last_words_file: str = paths.LAST_WORDS_FILE
    # beside them, the memory a restored or rebooted VM goes on from (restore); empty: not kept
    memory_file: str = paths.MEMORY_FILE
    restore_grace_seconds: float = 600  # after such a restore: not deleted, trouble not counted
    credential_expires_at: str | None = None
    credential_check_seconds: float = 900  # how often a quiet tick proves the credential still works
    # Who this VM is and the credential handed to it (handoff.py): the metadata service (empty: not asked),
    # else cloud-init's record of this boot (in /run: never a boot before); neither: server_id is trusted
    metadata_url: str = ""
    instance_data_file: str = "/run/cloud-init/instance-data.json"
    tick_seconds: float = 60  # the timer's interval: a deadline before the next tick is waited for
    disk_seconds: float = 5  # how long a tick waits for the data volume's reads before it counts as trouble
    armed_at: float = 0  # when this config was written (the role arms; the grace runs from then too)
    gpu_percent: float | None = 10.0  # IDLE_GPU_PERCENT: a GPU busier than this is work; None: not read
    hung_seconds: float | None = 3600.0  # IDLE_HUNG_MINUTES: counters with every GPU quiet this long: hung; None: never
    nvidia_smi: str = "nvidia-smi"  # found on PATH, as the NVIDIA driver installs it
    shell: bool = True  # IDLE_SHELL: a key typed in a terminal holds the clock back
    pts_root: str = "/dev/pts"
    keep_alive_command: str = ""  # KEEP_ALIVE_COMMAND, run by /bin/sh each tick; empty: none
    keep_alive_timeout: float = 30  # seconds it may run before it counts as failed
    billing_hour: str = "off"  # BILLING_HOUR: off, clock or rental
    billing_margin_seconds: float = 180  # a paid hour is used up to this long before it ends
    rental_started_at: float | None = None  # the server's creation (unix time), for BILLING_HOUR=rental
    llm_runtime: str = "none"  # LLM_RUNTIME: ollama or llamacpp, whose own activity keeps the VM; none: no runtime
    llm_url: str = "http://127.0.0.1:11434"  # the runtime's API on the VM (LLM_REMOTE_PORT)
    llm: bool = True  # IDLE_LLM: the runtime is asked each tick; off: not looked at

    @classmethod
    def load(cls, path: Path) -> Config:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):  # a tick, a check and the arm all refuse it in words, not a traceback
            raise ValueError("the config is not a JSON object")
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        for key in ("comfy_ports", "models_dirs"):  # JSON lists
            if key in known:
                known[key] = tuple(known[key])
        for key in ("idle_seconds", "grace_seconds", "cap_seconds", "credential_check_seconds", "tick_seconds",
                    "keep_alive_timeout", "disk_seconds", "restore_grace_seconds"):  # fmt: skip
            if key in known:
                known[key] = float(known[key])
        for key in ("gpu_percent", "hung_seconds"):  # off (YAML reads it as false), empty or null: not looked at
            if key in known:
                raw = known[key]
                known[key] = None if raw is False or raw in (None, "", "off", "False", "None") else float(raw)
        for key in ("shell", "llm"):
            if key in known:
                known[key] = str(known[key]).lower() in ("true", "1", "yes", "on")
        known["llm_runtime"] = str(known.get("llm_runtime") or "none")
        if known["llm_runtime"] not in ("none", "ollama", "llamacpp"):
            raise ValueError(f"llm_runtime {known['llm_runtime']!r} is none of none, ollama, llamacpp")
        known["keep_alive_command"] = str(known.get("keep_alive_command") or "")
        if "billing_margin_seconds" in known:
            known["billing_margin_seconds"] = float(known["billing_margin_seconds"])
        if known.get("billing_hour") not in (None, "off", "clock", "rental"):
            raise ValueError(f"billing_hour {known['billing_hour']!r} is none of off, clock, rental")
        # read only where it counts, and never fatal: a killer that cannot load its config deletes nothing
        try:
            rental = known.get("billing_hour") == "rental"
            known["rental_started_at"] = _unix_time(known.get("rental_started_at")) if rental else None
        except ValueError:
            known["rental_started_at"] = None
        known.setdefault("armed_at", path.stat().st_mtime)
        return cls(**known)

    def limits(self) -> Limits:
        return Limits(
            idle_seconds=self.idle_seconds,
            grace_seconds=self.grace_seconds,
            cap_seconds=self.cap_seconds,
            gpu_percent=self.gpu_percent,
            billing_hour=self.billing_hour or "off",
            billing_margin_seconds=self.billing_margin_seconds,
            rental_started_at=self.rental_started_at,
            restore_grace_seconds=self.restore_grace_seconds,
            hung_seconds=self.hung_seconds,
        )


def _unix_time(value: object) -> float | None:
    """A unix time, or Nova's ISO 8601 ("2026-12-02T14:05:09Z"); None when empty."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))  # a unix time handed over as text (-e on the command line)
    except ValueError:
        pass
    text = str(value).replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    # timezone.utc, not datetime.UTC (3.11+): the VM's python3 may be Ubuntu 22.04's 3.10
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()  # noqa: UP017


class CredentialRefused(Exception):
    """Keystone or Nova said no to the credential (401/403): the killer is blind until re-armed."""


class Unreachable(Exception):
    """A transient failure: no answer, a timeout, a 5xx. The next try may work."""


class Gone(CredentialRefused):
    """Nova's own 404 about this server: gone, or (for the proof) not in the region the killer asks."""


# What a cut connection raises: OSError (refused, reset, timed out) or http.client's IncompleteRead and
# BadStatusLine, which are not OSErrors; ValueError: an answer that is not the JSON it should be.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException, ValueError)


def _body(e: urllib.error.HTTPError) -> str:
    """An error's body (its first 4000 characters): the service's own words on what it refused."""
    try:
        return e.read(4000).decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return ""


def _in_short(body: str) -> str:
    """A body in one line of at most 300 characters, for a message."""
    return " ".join(body[:300].split()) or "no body"


def _not_found(body: str, kind: str, resource_id: str | None) -> bool:
    """Whether a 404 is the service's own word that this resource is not there: Nova's itemNotFound naming the
    server ("Instance <id> could not be found.", nova/exception.py InstanceNotFound, sent by
    nova/api/openstack/common.py get_instance), Neutron's FloatingIPNotFound naming the address
    (neutron_lib/exceptions/l3.py). A 404 from a URL built wrong says neither: a gateway's page (which may
    quote the URL, id and all), Neutron's HTTPNotFound for a doubled /v2.0. No proof the thing is gone."""
    try:
        said = json.loads(body)
    except ValueError:
        return False
    if not resource_id or not isinstance(said, dict):
        return False
    if kind == "nova":
        fault = said.get("itemNotFound")
        return isinstance(fault, dict) and resource_id in str(fault.get("message"))
    fault = said.get("NeutronError")
    named = isinstance(fault, dict) and resource_id in str(fault.get("message"))
    return named and fault.get("type") == "FloatingIPNotFound"


# ------------------------------------------------------------------ acting
def authenticate(cfg: Config) -> tuple[str, list]:
    """A token and the service catalogue, from the application credential."""
    if not cfg.credential_id or not cfg.credential_secret:
        raise CredentialRefused("no credential in the config (armed without the cloud)")
    body = {"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
        "id": cfg.credential_id, "secret": cfg.credential_secret}}}}  # fmt: skip
    request = urllib.request.Request(
        cfg.auth_url.rstrip("/") + "/auth/tokens",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
            token = reply.headers["X-Subject-Token"]
            catalog = json.loads(reply.read())["token"].get("catalog") or []
    except urllib.error.HTTPError as e:
        if e.code in (401, 403, 404):
            raise CredentialRefused(f"Keystone refused the credential ({why(e)})") from None
        raise Unreachable(f"Keystone: {why(e)}") from None
    except (*TRANSPORT_ERRORS, KeyError) as e:
        raise Unreachable(f"Keystone at {cfg.auth_url}: {why(e)}") from None
    return token, catalog


def endpoint(catalog: list, service_type: str, interface: str, region: str | None) -> str:
    """The URL the killer's calls go to; none that fits is a refusal, not a hiccup: it never heals by itself."""
    found = [
        ep
        for service in catalog
        if service.get("type") == service_type
        for ep in service.get("endpoints") or ()
        if ep.get("interface") == interface and region in (None, ep.get("region_id"), ep.get("region"))
    ]
    regions = {ep.get("region_id") or ep.get("region") for ep in found}
    if region is None and len(regions) > 1:  # a DELETE in the wrong region answers 404: never guess
        raise CredentialRefused(
            f"{service_type} is in several regions ({', '.join(sorted(map(str, regions)))}) and no region is set "
            "(OS_REGION_NAME in .env)"
        )
    if found:
        return found[0]["url"].rstrip("/")
    where = f" in region {region}" if region else ""
    raise CredentialRefused(f"the catalogue has no {interface} {service_type} endpoint{where}")


def own_server(cfg: Config, login: tuple[str, list] | None = None) -> str:
    """The proof: a GET of this server through the very endpoint, region and path its DELETE uses. Keystone
    gives an access-ruled credential a token whatever its rules say; Nova's keystonemiddleware matches the
    rule against the path Nova itself sees, so only a call to Nova shows the DELETE would be taken."""
    path, _ = show_own_server(cfg, login)
    return f"GET {path} answered by Nova"


def show_own_server(cfg: Config, login: tuple[str, list] | None = None) -> tuple[str, dict]:
    """The path asked and Nova's answer to a GET of this server (own_server), each refusal in words."""
    token, catalog = login or authenticate(cfg)
    url = f"{endpoint(catalog, 'compute', cfg.interface, cfg.region_name)}/servers/{cfg.server_id}"
    path = urllib.parse.urlsplit(url).path
    request = urllib.request.Request(url, headers={"X-Auth-Token": token}, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:
            said = json.loads(reply.read())
        shown = said.get("server") if isinstance(said, dict) else None
        if not isinstance(shown, dict):
            raise ValueError(f"not a server: {_in_short(json.dumps(said))}")
    except urllib.error.HTTPError as e:
        if e.code == 401:  # keystonemiddleware: no rule matches the path Nova sees, or Nova checks no rules
            raise CredentialRefused(
                f"Nova refused GET {path} (HTTP 401): its access rule does not match the path Nova sees "
                "(a gateway before Nova? set idle_killer_rule_path), or Nova does not check access rules"
            ) from None
        if e.code == 403:
            raise CredentialRefused(f"the cloud's policy forbids GET {path} to this credential (HTTP 403)") from None
        if e.code == 404:
            body = _body(e)
            if _not_found(body, "nova", cfg.server_id):
                region = cfg.region_name or "the catalogue's only region"
                raise Gone(f"Nova in {region} has no server {cfg.server_id} (the wrong region?)") from None
            raise CredentialRefused(
                f"GET {path} answered HTTP 404 not about server {cfg.server_id}: {_wrong_url(body)}"
            ) from None
        raise Unreachable(f"Nova: {why(e)}") from None
    except TRANSPORT_ERRORS as e:
        raise Unreachable(f"Nova at {url}: {why(e)}") from None
    if shown.get("id") != cfg.server_id:
        raise CredentialRefused(f"Nova answered GET {path} with server {shown.get('id')!r}, not {cfg.server_id}")
    return path, shown


def own_instance_id(cfg: Config) -> str | None:
    """The server this VM is (handoff.instance_id): the metadata service's word, else cloud-init's."""
    return handoff.instance_id(handoff.read_metadata(cfg.metadata_url), cfg.instance_data_file)


def not_this_server(cfg: Config) -> str | None:
    """Why this config must never act here: it names another server (a kept boot volume under a new VM
    that has not been handed its credential yet, where the old one would delete nothing, or worse, another VM)."""
    own = own_instance_id(cfg)
    if own and own != cfg.server_id:
        armed = f"armed for {cfg.server_id}" if cfg.server_id else "installed at its first boot, for no server yet"
        return (f"this VM is server {own} but the killer is {armed}: it waits for the credential up hands it (the "
                "server's metadata) or its arm")  # fmt: skip
    return None


def take_handoff(path: Path, cfg: Config, now: float) -> Config:
    """The config after taking the credential handed to this server (handoff.adopted_config), written root only
    where the config is, under the config's lock (the arm writes it too); unchanged when none was handed or the
    config holds it already. Another credential for the same server is taken only once Nova proves it."""
    meta = handoff.read_metadata(cfg.metadata_url)
    own = handoff.instance_id(meta, cfg.instance_data_file)
    given = handoff.handed(meta)
    if not own or given is None:
        return cfg
    try:
        with config_lock(path):
            raw = json.loads(path.read_text())
            new = handoff.adopted_config(raw, own, given, now, written_at=cfg.armed_at)
            if new is None:
                return cfg
            if raw.get("server_id") == own:
                own_server(replace(cfg, credential_id=given.credential_id, credential_secret=given.credential_secret))
            write_config(path, config_text(new))
            taken = Config.load(path)
    except (CredentialRefused, Unreachable, OSError, ValueError, TypeError, AttributeError) as e:
        # the config as it was goes on (and for another server, never acts)
        print(f"{WARNING}the credential handed to this server was not taken: {e}", file=sys.stderr)
        return cfg
    print(f"{INFO}took the credential handed to server {taken.server_id}", file=sys.stderr)
    return taken


@contextlib.contextmanager
def config_lock(path: Path):
    """One writer of the config at a time: a tick taking a handoff and the role's arm."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def config_text(raw: dict) -> str:
    """A config as the program writes it itself: one stable form, so the same content is the same file."""
    return json.dumps(raw, indent=4, sort_keys=True, ensure_ascii=False) + "\n"


def filled(text: str, held_path: Path) -> str:
    """The arm's config with its secret: the role leaves it out (null) when up handed the credential to the
    server, and the VM has it already (the config it holds) or reads it where up put it (the metadata)."""
    try:
        raw = json.loads(text)
    except ValueError:
        return text  # refused in words by write_config's load
    if not isinstance(raw, dict) or raw.get("credential_secret") or not raw.get("credential_id"):
        return text
    with contextlib.suppress(OSError, ValueError, AttributeError):
        held = json.loads(held_path.read_text())
        if held.get("credential_id") == raw["credential_id"] and held.get("credential_secret"):
            return config_text({**raw, "credential_secret": held["credential_secret"]})
    handoff.forget()  # the arm comes right after up handed it: never an answer from before
    given = handoff.handed(handoff.read_metadata(str(raw.get("metadata_url") or "")))
    if given and given.credential_id == raw["credential_id"]:
        return config_text({**raw, "credential_secret": given.credential_secret})
    return text


def _wrong_url(body: str) -> str:
    return f"not the service's answer, the catalogue's URL may be wrong ({_in_short(body)})"


def delete_server(cfg: Config, login: tuple[str, list] | None = None) -> str:
    """Delete this server (never its volumes: Nova keeps volumes made with delete_on_termination false)."""
    token, catalog = login = login or authenticate(cfg)
    url = f"{endpoint(catalog, 'compute', cfg.interface, cfg.region_name)}/servers/{cfg.server_id}"
    request = urllib.request.Request(url, headers={"X-Auth-Token": token}, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT):
            return f"asked Nova to delete server {cfg.server_id}"
    except urllib.error.HTTPError as e:
        body = _body(e)
        if e.code == 404 and _not_found(body, "nova", cfg.server_id):  # the proof found it through this URL: gone
            return f"server {cfg.server_id} is already gone"
        if e.code == 404:  # never "gone": the server may bill on behind a URL that reaches no Nova
            raise CredentialRefused(
                f"Nova's DELETE answered HTTP 404 not about this server: {_wrong_url(body)}"
            ) from None
        if e.code == 409:
            return _conflict(cfg, login, body)
        if e.code in (401, 403):
            raise CredentialRefused(f"Nova refused to delete server {cfg.server_id} ({why(e)})") from None
        raise Unreachable(f"Nova: {why(e)}") from None
    except TRANSPORT_ERRORS as e:
        raise Unreachable(f"Nova at {url}: {why(e)}") from None


def _conflict(cfg: Config, login: tuple[str, list], body: str) -> str:
    """A 409 to the DELETE. Upstream Nova takes a delete in any state (nova/compute/api.py API.delete:
    check_instance_state(vm_state=None, task_state=None)); a lock or a vendor's build may refuse, and
    InstanceInvalidState's text names the delete whatever the cause. Only Nova's word on the server itself
    says a delete is under way; anything else is tried again next tick, in Nova's words."""
    try:
        _, shown = show_own_server(cfg, login)
    except Gone:
        return f"server {cfg.server_id} is already gone"
    if shown.get("OS-EXT-STS:task_state") == "deleting" or shown.get("status") in ("DELETED", "SOFT_DELETED"):
        return f"server {cfg.server_id} is being deleted already"
    raise Unreachable(f"Nova: HTTP 409 {_in_short(body)}")


def network_url(catalog: list, cfg: Config) -> str:
    """Neutron's v2.0 API: its catalogue entry is usually unversioned, some clouds list it with /v2.0."""
    base = endpoint(catalog, "network", cfg.interface, cfg.region_name)
    return base if base.endswith("/v2.0") else f"{base}/v2.0"


def delete_floating_ip(cfg: Config, login: tuple[str, list] | None = None) -> str:
    """Delete the floating IP the server had: it bills by the hour with or without a server (Selectel).
    Neutron takes the DELETE of an address still associated (it disassociates it first)."""
    token, catalog = login or authenticate(cfg)
    url = f"{network_url(catalog, cfg)}/floatingips/{cfg.floating_ip_id}"
    request = urllib.request.Request(url, headers={"X-Auth-Token": token}, method="DELETE")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT):
            return f"deleted floating IP {cfg.floating_ip_id}"
    except urllib.error.HTTPError as e:
        body = _body(e)
        if e.code == 404 and _not_found(body, "neutron", cfg.floating_ip_id):
            return f"floating IP {cfg.floating_ip_id} is already gone"
        if e.code == 404:
            raise CredentialRefused(
                f"Neutron's DELETE answered HTTP 404 not about this address: {_wrong_url(body)}"
            ) from None
        if e.code in (401, 403):
            raise CredentialRefused(f"Neutron refused to delete floating IP {cfg.floating_ip_id} ({why(e)})") from None
        raise Unreachable(f"Neutron: {why(e)}") from None
    except TRANSPORT_ERRORS as e:
        raise Unreachable(f"Neutron at {url}: {why(e)}") from None


def with_retries(action, tries: int = 3, pause: float | None = None):
    """Transient failures are tried again a few times within the tick; the next tick tries anew."""
    pause = RETRY_PAUSE if pause is None else pause  # read at the call: tests set it to 0
    for attempt in range(tries):
        try:
            return action()
        except Unreachable:
            if attempt == tries - 1:
                raise
            time.sleep(pause * (attempt + 1))
    raise AssertionError("unreachable")


# ------------------------------------------------------------------ one tick
def load_status(path: Path) -> dict:
    """The last tick's record, each field checked: a damaged file must never stop the killer."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        status = {}
    if not isinstance(status, dict):
        status = {}
    for key in ("booted_at", "tick_at", "fires_at", "restored_at", "armed_at"):
        if key in status and _number(status[key]) is None:
            status.pop(key)
    memory = status.get("memory") if isinstance(status.get("memory"), dict) else {}
    status["memory"] = {k: _number(memory.get(k)) for k in Memory.__dataclass_fields__ if k != "llm_seen"}
    seen = memory.get("llm_seen") if isinstance(memory.get("llm_seen"), dict) else {}
    status["memory"]["llm_seen"] = {str(k): v for k, v in seen.items() if _number(v) is not None}
    credential = status.get("credential") if isinstance(status.get("credential"), dict) else {}
    credential["checked_at"] = _number(credential.get("checked_at"))
    status["credential"] = credential
    if not isinstance(status.get("session_id"), str):
        status.pop("session_id", None)
    return status


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def write_status(path: Path, status: dict, durable: bool = False) -> None:
    """Whole or not at all; durable: through to the disk, its folder too (the guest may be cut off next)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=path.name + ".", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(status, indent=1, sort_keys=True) + "\n")
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)  # a full disk keeps no half-written copies
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


@contextlib.contextmanager
def status_lock(path: Path):
    """One reader-writer of the status file at a time: a tick, or the check the role runs beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def look_at_disk(cfg: Config, now: float) -> dict:
    """What the data volume says, read in children that may take disk_seconds each: a network disk that
    hangs must never hold the tick (idle_look.in_a_child). The hold and the volume's mount and marker first,
    on their own (a slow walk of a large Models must not hide a hold), then the downloads under Models.
    Silent or failing, it is trouble (capped), with no hold and no download seen."""

    def volume() -> dict:
        return {"hold_until": read_hold(cfg.hold_file, cfg.server_id),
                "data_volume": data_volume_problem(cfg.data_mount, cfg.data_marker)}  # fmt: skip

    def downloads() -> dict:
        return {"downloads": list(fresh_downloads(cfg.models_dirs, now))}

    said: dict = {"downloads": [], "hold_until": None, "data_volume": None, "data_growing_since": None}
    for look, what in ((volume, "at"), (downloads, "under")):
        try:
            answer = in_a_child(look, cfg.disk_seconds)
            problem = None if answer is not None else f"did not answer within {cfg.disk_seconds:g} s"
        except OSError as e:
            answer, problem = None, f"could not be read: {e}"
        if answer is None:
            where = cfg.data_mount if look is volume else ", ".join(cfg.models_dirs)
            said["data_volume"] = f"{what} {where} {problem} (a stuck network disk?)"
            break
        said.update(answer)
    if said["data_volume"] and cfg.grow_unit:  # not mounted yet: its filesystem may be being grown
        said["data_growing_since"] = unit_starting_since(cfg.grow_unit, now)
    return said


def look_at_swarm(cfg: Config, status: dict, now: float) -> tuple[Observation, SwarmLook, list[dict]]:
    """What SwarmUI and its ComfyUIs say: the generations they hold, their backends."""
    booted_at = max(float(status.get("booted_at") or now), cfg.armed_at)
    if not cfg.swarmui_url:  # none installed yet: nothing to ask, and no trouble (idle_decision's swarmui)
        seen = Observation(now=now, booted_at=booted_at, restored_at=status.get("restored_at"), swarmui=False)
        return seen, SwarmLook(None, None, None, None, None), []
    swarm = swarm_look(cfg.swarmui_url, status.get("session_id"), cfg.comfy_start_script)
    # one read of the service's processes: its ComfyUIs' ports, and the installs it runs beside them
    commands = unit_commands(cfg.cgroup_root, cfg.swarmui_unit, cfg.proc_root)
    ports = cfg.comfy_ports or comfy_ports_of(commands)
    comfy = comfy_queues(ports)
    seen = Observation(
        now=now,
        booted_at=booted_at,
        restored_at=status.get("restored_at"),
        status=swarm.status,
        error=swarm.error,
        backends=swarm.backends,
        backends_error=swarm.backends_error,
        comfy_queue=sum(c["queue"] or 0 for c in comfy),
        comfy_silent=tuple(c["port"] for c in comfy if c["queue"] is None),
        installs=installs_of(commands),
    )
    return seen, swarm, comfy


def observe(cfg: Config, status: dict, now: float, disk: dict) -> tuple[Observation, SwarmLook, list[dict]]:
    """One look at everything that may keep the VM; also what SwarmUI and its ComfyUIs said."""
    seen, swarm, comfy = look_at_swarm(cfg, status, now)
    seen = replace(
        seen,
        downloads=tuple(disk["downloads"]),
        seeding_until=read_time(cfg.seeding_lock),
        hold_until=disk["hold_until"],
        data_volume=disk["data_volume"],
        data_growing_since=disk.get("data_growing_since"),
    )
    if cfg.gpu_percent is not None:
        gpu = read_gpus(cfg.nvidia_smi)
        seen = replace(seen, gpus=gpu.gpus, gpu_error=gpu.error, gpu_absent=gpu.absent)
    if cfg.shell:
        seen = replace(seen, shell_input=last_terminal_input(cfg.pts_root))
    if cfg.llm and cfg.llm_runtime != "none":
        seen = replace(seen, llm=llm_look(cfg.llm_runtime, cfg.llm_url))
    if cfg.keep_alive_command:
        verdict, why = run_keep_alive(cfg.keep_alive_command, cfg.keep_alive_timeout)
        seen = replace(seen, keep_alive=verdict, keep_alive_error=why)
    return seen, swarm, comfy


def tick(cfg: Config, now: float | None = None, say=print) -> dict:
    now = time.time() if now is None else now
    disk = look_at_disk(cfg, now)  # before the lock: a child left behind on a stuck disk must not hold it
    with status_lock(Path(cfg.status_file)):
        return _tick(cfg, now, say, disk)


def _tick(cfg: Config, now: float, say, disk: dict) -> dict:
    path = Path(cfg.status_file)
    before = load_status(path)
    boot = this_boot(cfg)  # read once: restore compares it, keep_memory records it
    before = restore(cfg, before, now, boot) or before
    before["restored_at"] = _restored_at(cfg, before)  # once: observe() and the status file read it
    seen, swarm, comfy = observe(cfg, before, now, disk)
    memory = Memory(**before["memory"])
    decision = decide(seen, cfg.limits(), memory)
    credential = dict(before["credential"] or {})
    credential.setdefault("state", "unchecked")
    status = {
        "server_id": cfg.server_id,
        "booted_at": before.get("booted_at") or now,
        "restored_at": before["restored_at"],  # this boot came back with the memory of the life before
        "armed_at": cfg.armed_at,
        "tick_at": now,
        "tick_seconds": cfg.tick_seconds,  # how long the laptop's watchdog waits for the next before it acts
        "session_id": swarm.session_id,
        "action": decision.action,
        "reason": decision.reason,
        # gpu-rent's ComfyUI backends in SwarmUI ("2 of 2 ComfyUI backends running"), and each
        # ComfyUI process found with its own queue (None: it does not answer yet)
        "backends": backends_line(seen.backends),
        "comfyui": comfy,
        # each GPU as nvidia-smi told it, None when not read (gpu_error says why)
        "gpus": None if seen.gpus is None else [dict(zip(GPU_FIELDS, g, strict=True)) for g in seen.gpus],
        "gpu_error": seen.gpu_error,
        # what the LLM runtime told (its loaded models, slots or requests), None when not asked
        "llm": None if seen.llm is None else asdict(seen.llm),
        "fires_at": decision.fires_at,
        "paid_until": decision.paid_until,
        "memory": asdict(decision.memory),
        "limits": asdict(cfg.limits()),
        "credential": credential,
        "credential_expires_at": cfg.credential_expires_at,
    }
    if decision.action == DELETE:
        status.update(delete_self(cfg, credential, now, say, decision.reason))
        loud = CRIT if credential.get("state") == "refused" else WARNING
        say(f"{loud}{decision.action}: {decision.reason}; {status['acted']}")
    else:
        if now - (credential.get("checked_at") or 0) >= cfg.credential_check_seconds:
            credential.update(_check(cfg, now))
        say(_line(decision, credential))
    try:
        write_status(path, status)
    except OSError as e:  # a full /run: the memory on the boot volume keeps the clock (restore: this boot's own)
        say(f"{WARNING}status not written to {path} ({e}): the idle clock goes on from {cfg.memory_file or 'nothing'}")
        # the last report would tell status and the laptop's watchdog a deadline this tick may have moved: none
        # is better than a stale one (the watchdog forgets a report it cannot read, never acts on it)
        with contextlib.suppress(OSError):
            path.unlink()
    keep_memory(cfg, status, boot)
    return status


def restore(cfg: Config, before: dict, now: float, boot: str | None) -> dict | None:
    """The memory kept on the boot volume, when it is of this server and this arming and newer than /run's.
    Of this boot: /run could not be written (full), and the clock goes on as kept. Of a boot before, on a new
    boot (the status in /run is gone): a preemption's restore or a reboot; its idle clock moves on by the
    time the VM was down, which is no idleness on the VM; decide() gives it the restore's grace from now."""
    if not cfg.memory_file:
        return None
    kept = load_status(Path(cfg.memory_file))
    if kept.get("server_id") != cfg.server_id or kept.get("armed_at") != cfg.armed_at or not kept.get("tick_at"):
        return None  # another server's (a kept boot volume under a new VM), or another arming's: a fresh start
    if boot is not None and kept.get("boot") == boot:
        if (before.get("tick_at") or 0) >= kept["tick_at"]:
            return None  # /run's record is as new: every tick but those after a failed write
        return {**before, "booted_at": kept.get("booted_at") or now, "memory": kept["memory"],
                "restored_at": kept.get("restored_at")}  # fmt: skip
    if before.get("booted_at") is not None:
        return None
    down = max(0.0, now - kept["tick_at"])
    memory = {k: (v + down if k in ("idle_since", "troubled_since", "hung_since") and v is not None else v)
              for k, v in kept["memory"].items()}  # fmt: skip
    return {**before, "booted_at": kept.get("booted_at") or now, "memory": memory, "restored_at": now}


def this_boot(cfg: Config) -> str | None:
    """This boot: the kernel's boot_id and when PID 1 started (clock ticks after the kernel's boot, field 22
    of /proc/1/stat). The boot_id alone is shared by the containers on one kernel (the ground's VMs); PID 1's
    start tells each of their boots apart, as it does a VM's. None when /proc cannot say."""
    try:
        kernel = Path(cfg.proc_root, "sys/kernel/random/boot_id").read_text().strip()
        stat = Path(cfg.proc_root, "1/stat").read_text()
        started = stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return None
    return f"{kernel}/{started}"


def _restored_at(cfg: Config, status: dict) -> float | None:
    """When this boot came back with its memory; None when it did not, or an arming came since (a fresh
    start, with the boot's grace from the arming)."""
    restored_at = status.get("restored_at")
    return restored_at if restored_at is not None and restored_at >= cfg.armed_at else None


def keep_memory(cfg: Config, status: dict, boot: str | None) -> None:
    """What restore needs, on the boot volume; never fatal (the killer acts without it, as before)."""
    if not cfg.memory_file:
        return
    kept = {k: status.get(k) for k in ("server_id", "armed_at", "booted_at", "restored_at", "tick_at", "memory")}
    kept["boot"] = boot  # this_boot's: restore tells a full /run of this boot from a boot before by it
    try:
        write_status(Path(cfg.memory_file), kept)
    except OSError as e:
        print(f"{WARNING}memory not kept at {cfg.memory_file}: {e}", file=sys.stderr)


def _line(decision: Decision, credential: dict) -> str:
    when = f"; fires at {time.strftime('%H:%M:%S', time.localtime(decision.fires_at))}" if decision.fires_at else ""
    line = f"{decision.action}: {decision.reason}{when}"
    if credential.get("state") == "refused":
        return f"{CRIT}{line}; CREDENTIAL REFUSED, this VM cannot delete itself: {credential.get('message')}"
    return INFO + line


def delete_self(
    cfg: Config, credential: dict, now: float, say, reason: str = "", login: tuple[str, list] | None = None
) -> dict:
    """The server first (the GPU is what bills most), then its floating IP, in one login (login: one made
    already), before the VM goes: the next tick may never come."""
    stranger = not_this_server(cfg)
    if stranger:  # the old credential may still delete the server it names, which is not this one
        credential.update(state="refused", checked_at=now, message=stranger)
        return {"acted": f"CREDENTIAL REFUSED, not deleted: {stranger}"}
    words = {"server_id": cfg.server_id, "at": now, "reason": reason, "acted": "deleting"}
    # A tick before this one may have had its DELETE taken already (Nova takes a while to end the server, and
    # the next tick, or the last breath, asks again): those words stay, they say when and why it went.
    told = taken_already(cfg)
    if not told:
        _last_words(cfg, words)  # before the DELETE: once Nova takes it, the guest may not write again
    try:
        login = login or with_retries(lambda: authenticate(cfg))
        done = with_retries(lambda: delete_server(cfg, login))
    except CredentialRefused as e:
        if not told:
            _forget_last_words(cfg)  # the server stays: words left would blame the killer for a later stop
        credential.update(state="refused", checked_at=now, message=str(e))
        return {"acted": f"CREDENTIAL REFUSED, cannot delete this server: {e}"}
    except Unreachable as e:
        if not told:
            _forget_last_words(cfg)
        return {"acted": f"delete failed, tried again next tick: {e}"}
    credential.update(state="ok", checked_at=now, message=None)
    acted = {"acted": done, "deleted_at": time.time()}  # when Nova took the DELETE
    if not told:  # said at once: Nova destroys the guest moments after it took the DELETE, maybe before the address
        _last_words(cfg, {**words, "acted": done, "deleted_at": acted["deleted_at"]})
    if cfg.floating_ip_id:  # the guest is going: one quick second try, no next tick to count on
        try:
            acted["floating_ip"] = with_retries(lambda: delete_floating_ip(cfg, login), tries=2, pause=0.5)
        except (CredentialRefused, Unreachable) as e:
            acted["floating_ip"] = f"floating IP NOT deleted, it bills until `gpu-rent stop`: {e}"
        acted["acted"] = f"{done}; {acted['floating_ip']}"
        if not told:
            _last_words(cfg, {**words, "acted": acted["acted"], "deleted_at": acted["deleted_at"]})
    return acted


def taken_already(cfg: Config) -> bool:
    """Whether the last words say Nova took this server's DELETE already (a tick or a last breath before)."""
    try:
        said = json.loads(Path(cfg.last_words_file).read_text()) if cfg.last_words_file else {}
    except (OSError, ValueError):
        return False
    return isinstance(said, dict) and said.get("server_id") == cfg.server_id and bool(said.get("deleted_at"))


def _forget_last_words(cfg: Config) -> None:
    if cfg.last_words_file:
        with contextlib.suppress(OSError):
            os.unlink(cfg.last_words_file)


def _last_words(cfg: Config, words: dict) -> None:
    """Why this server goes, kept where the next up reads it (written through to the disk: the guest
    may be cut off at any moment after). Never fatal: the DELETE matters more."""
    if not cfg.last_words_file:
        return
    path = Path(cfg.last_words_file)
    try:
        write_status(path, words, durable=True)
    except OSError as e:
        print(f"{WARNING}last words not kept at {path}: {e}", file=sys.stderr)


def _check(cfg: Config, now: float) -> dict:
    """The proof (own_server), its answer kept as the credential's state: ok, refused or unreachable."""
    stranger = not_this_server(cfg)
    if stranger:
        return {"state": "refused", "checked_at": now, "message": stranger}
    try:
        proof = with_retries(lambda: own_server(cfg), tries=2)
        return {"state": "ok", "checked_at": now, "message": None, "proof": proof}
    except CredentialRefused as e:
        return {"state": "refused", "checked_at": now, "message": str(e)}
    except Unreachable as e:
        return {"state": "unreachable", "checked_at": now, "message": str(e)}


def write_config(path: Path, text: str) -> bool:
    """The config as the role renders it, root only (it holds the secret), whole or not at all, and only
    once it loads as a Config; its folder root only too. True when anything changed: an unchanged file
    keeps its mtime, which is when the grace began (Config.armed_at)."""
    changed = False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.parent.stat().st_mode) != 0o700:
        os.chmod(path.parent, 0o700)
        changed = True
    with contextlib.suppress(FileNotFoundError):
        if path.read_bytes() == text.encode() and stat.S_IMODE(path.stat().st_mode) == 0o600:
            return changed
    fd, partial = tempfile.mkstemp(prefix=path.name + ".", suffix=".partial", dir=path.parent)  # 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        Config.load(Path(partial))  # what the timer's tick would refuse is refused here, the old config kept
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a second copy of the secret is never left behind
            os.unlink(partial)
        raise
    return True


def check_and_record(cfg: Config) -> dict:
    """The credential proven (or not) from the VM, and the answer kept in the status file."""
    return recorded(cfg, _check(cfg, time.time()))


def unhanded(cfg: Config) -> dict:
    """The arm was given a credential handed to the server, and the VM could read it nowhere: recorded refused."""
    where = cfg.metadata_url or "no metadata service (idle_killer_metadata_url is empty)"
    message = (f"credential {cfg.credential_id} was handed to this server, but the VM could not read it from "
               f"{where}; on a cloud without a metadata service set idle_killer_metadata_url to '' (it then goes "
               "over SSH)")  # fmt: skip
    return recorded(cfg, {"state": "refused", "checked_at": time.time(), "message": message})


def recorded(cfg: Config, result: dict) -> dict:
    """The credential's state kept in the status file, where status and the laptop read it."""
    path = Path(cfg.status_file)
    with status_lock(path):
        status = load_status(path)
        status["credential"] = result
        status.setdefault("server_id", cfg.server_id)
        write_status(path, status)
    return result


def _said(result: dict) -> str:
    return f"credential {result['state']}" + (f": {result['message']}" if result["message"] else "")


def arm(path: Path, text: str, look_unit: str | None) -> int:
    """One line of JSON: whether the config changed, what Keystone said, and the first look's end."""
    try:
        with config_lock(path):
            changed = write_config(path, filled(text, path))
        cfg = Config.load(path)
    except (OSError, ValueError, TypeError) as e:  # UnicodeDecodeError is a ValueError
        print(f"{CRIT}idle-killer config {path} not written, this VM cannot delete itself: {e}", file=sys.stderr)
        return 2
    result = check_and_record(cfg) if cfg.credential_secret or not cfg.credential_id else unhanded(cfg)
    said = {"changed": changed, "credential_ok": result["state"] == "ok", "credential_state": result["state"],
            "credential": _said(result)}  # fmt: skip
    # An up (or seed-llm) arms before it seeds and holds the project's lock: a seeding lock here was left
    # by a killed run on this VM (it lives in /run, which a new boot empties) and would keep the VM
    # billing until its valid-until. Cleared here, in a round trip every up makes anyway; the seed role
    # releases only its own. A direct playbook run beside a gpu-rent command holds no project lock and
    # may clear that command's lock: its next part takes it again (fetch.py's download does not, on purpose).
    try:
        Path(cfg.seeding_lock).unlink()
        said["seeding_lock"] = "cleared"
    except FileNotFoundError:
        pass
    except OSError as e:
        said["seeding_lock"] = f"not cleared: {e}"
    if look_unit:  # a oneshot: systemctl returns when the look is done, so status reads it at once
        try:
            look = subprocess.run(["systemctl", "start", look_unit], capture_output=True, text=True)
            said["look"] = "done" if look.returncode == 0 else (look.stderr.strip() or f"rc {look.returncode}")
        except OSError as e:
            said["look"] = str(e)
    print(json.dumps(said))
    return 0


def first_boot(path: Path, text: str) -> int:
    """The first boot's config, written as the arm writes one (write_config) but only where none is: cloud-init's
    final stage runs once sshd is up, so the arm may have come first, and its config must stay."""
    try:
        with config_lock(path):
            if path.exists():
                print(f"{INFO}idle-killer config {path} kept: the arm wrote it first", file=sys.stderr)
                return 0
            write_config(path, text)
    except (OSError, ValueError, TypeError) as e:
        print(f"{CRIT}idle-killer config {path} not written, this VM cannot delete itself: {e}", file=sys.stderr)
        return 2
    print(f"{INFO}idle-killer config {path} written for the first boot: it takes its server and credential from "
          "the metadata service", file=sys.stderr)  # fmt: skip
    return 0


# How often busy --wait looks again, and says what still runs.
BUSY_LOOK_SECONDS = 10


def busy(cfg: Config, wait: float = 0, say=print) -> int:
    """The generations a restart of SwarmUI would cut, read as a tick reads them (idle_decision.queued_work),
    waited for up to `wait` seconds: 0 when none run (or SwarmUI does not answer: nothing to cut), 3 when some
    still do, named in the last line said; a ComfyUI that runs but does not tell its queue may hold prompts, so
    it is waited for too. Never decides or deletes anything, and writes nothing."""
    status = load_status(Path(cfg.status_file))  # the session the ticks keep, so no session is made per look
    end = time.monotonic() + wait
    while True:
        seen = look_at_swarm(cfg, status, time.time())[0]
        work = queued_work(seen) or silent_comfy(seen)
        if work is None:
            return 0
        if time.monotonic() + BUSY_LOOK_SECONDS > end:
            say(work)
            return 3
        say(f"waiting: {work}")
        time.sleep(BUSY_LOOK_SECONDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-rent-idle-killer", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("tick", "check", "arm", "busy", "first-boot"))
    parser.add_argument("--config", default=paths.CONFIG_FILE)
    parser.add_argument("--look", metavar="UNIT", help="arm: start UNIT (the killer's service) after the check")
    parser.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="busy: until no generation runs")
    args = parser.parse_args(argv)
    if args.command == "arm":
        return arm(Path(args.config), sys.stdin.read(), args.look)
    if args.command == "first-boot":
        return first_boot(Path(args.config), sys.stdin.read())
    if args.command == "busy":
        unarmed = Config(server_id="", auth_url="", credential_id=None, credential_secret=None)
        try:
            cfg = Config.load(Path(args.config)) if Path(args.config).exists() else unarmed
        except (OSError, ValueError, TypeError):
            cfg = unarmed  # where SwarmUI listens is all busy needs, and it has a default
        return busy(cfg, args.wait)
    try:
        cfg = Config.load(Path(args.config))
        cfg = take_handoff(Path(args.config), cfg, time.time())
    except (OSError, ValueError, TypeError) as e:
        print(f"{CRIT}idle-killer config {args.config} unusable, this VM cannot delete itself: {e}", file=sys.stderr)
        return 2
    if args.command == "check":
        result = check_and_record(cfg)
        print(_said(result))
        return 0 if result["state"] == "ok" else 1
    status = tick(cfg)
    # A deadline that falls before the next tick is kept to the second: wait for it, look again.
    fires_at = status.get("fires_at")
    if status["action"] != DELETE and fires_at and 0 < fires_at - time.time() <= cfg.tick_seconds:
        time.sleep(max(0.0, fires_at - time.time()))
        tick(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
