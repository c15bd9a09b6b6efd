"""Who this VM is, and the credential the laptop handed its killer without SSH: the metadata service.

`up` makes the killer's credential for a server the moment Nova has it ACTIVE (one credential per server,
named by it; Nova refuses a building server's metadata) and hands it over as the server's metadata under HANDOFF_KEY
(plugins/module_utils/gpu_rent_killer_handoff.py). Every VM reads its own metadata at
http://169.254.169.254/openstack/latest/meta_data.json, as cloud-init does: Neutron's metadata proxy
signs the asking VM's instance id, so a VM sees its own server's metadata and no other's. So the
killer on a kept boot volume, booted under a new server, learns two things there before any SSH: that
it is another server than its config names (it never acts on the old credential, which may delete
nothing or worse), and the new server's credential, which it takes at once (adopted_config).

Standard library only, names and pure judgements: idle_killer.py reads and writes.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import paths

NOVA_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a server's uuid
# Nova answers from its own cache (metadata_cache_expiration, 15 s by default); a link-local service
# that does not answer in this long is not there (a cloud without one, e.g. config drive only).
METADATA_TIMEOUT = 3.0
# One look per program run and this long: a tick asks who it is at its start, its proof and its delete.
MEMO_SECONDS = 20.0
_memo: dict[str, tuple[float, dict | None]] = {}


@dataclass(frozen=True)
class Handed:
    """The handoff's content: what the killer's config needs for this server and nothing else."""

    credential_id: str
    credential_secret: str = field(repr=False)
    floating_ip_id: str | None  # deleted after the server; None: kept (KEEP_FLOATING_IP)
    expires_at: str | None
    handed_at: float | None  # when the laptop handed it (unix time)


def read_metadata(url: str, timeout: float = METADATA_TIMEOUT) -> dict | None:
    """The metadata service's meta_data.json for this VM; None when it does not answer or url is empty."""
    if not url:
        return None
    now = time.monotonic()
    kept = _memo.get(url)
    if kept and now - kept[0] < MEMO_SECONDS:
        return kept[1]
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            found = json.loads(reply.read())
            found = found if isinstance(found, dict) else None
    except Exception:  # whatever a misbehaving service does (IncompleteRead is no OSError): not known
        found = None
    _memo[url] = (now, found)
    return found


def forget() -> None:
    """Ask the metadata service again at the next read (an adoption changed what the config says)."""
    _memo.clear()


def cloud_init_instance_id(instance_data_file: str) -> str | None:
    """The server this VM is, as cloud-init recorded it at this boot (/run: never a boot before)."""
    try:
        data = json.loads(Path(instance_data_file).read_text())
        found = str((data.get("v1") or {}).get("instance_id") or "")
    except (OSError, ValueError, AttributeError):
        return None
    return found if NOVA_ID.fullmatch(found) else None


def instance_id(meta: dict | None, instance_data_file: str) -> str | None:
    """The server this VM is: the metadata service's uuid, else cloud-init's record; None: not known. Only a
    Nova server id counts (an Ec2 or NoCloud datasource's instance id is another name)."""
    found = str((meta or {}).get("uuid") or "")
    if NOVA_ID.fullmatch(found):
        return found
    return cloud_init_instance_id(instance_data_file)


def handed(meta: dict | None) -> Handed | None:
    """The credential handed to this server, or None (none, or not one the laptop wrote)."""
    try:
        value = ((meta or {}).get("meta") or {}).get(paths.HANDOFF_KEY)
        raw = json.loads(value) if isinstance(value, str) else None
        if not isinstance(raw, dict) or not raw.get("c") or not raw.get("k"):
            return None
        return Handed(
            credential_id=str(raw["c"]),
            credential_secret=str(raw["k"]),
            floating_ip_id=str(raw["f"]) if raw.get("f") else None,
            expires_at=str(raw["e"]) if raw.get("e") else None,
            handed_at=float(raw["t"]) if raw.get("t") else None,
        )
    except (ValueError, TypeError, AttributeError):
        return None


def adopted_config(raw: dict, own: str | None, given: Handed | None, now: float, written_at: float = 0) -> dict | None:
    """The config to write when this server was handed a credential the config does not hold, else None.

    A new server (a kept boot volume under another VM) is a new arming: armed_at now, so the boot's grace
    runs from here and the old server's memory is not taken for this one's; its floating IP is the one
    handed (or none). The same server handed another credential (up made it anew and was cut off before its
    arm) keeps its arming (written_at, when the config was written); the caller proves that one before it is
    taken, as a handed credential may be older than the config's (the laptop's clock is not the VM's)."""
    if not own or given is None:
        return None
    if raw.get("server_id") == own and raw.get("credential_id") == given.credential_id and raw.get("credential_secret"):
        return None  # held already
    new = dict(raw)
    new.update(
        credential_id=given.credential_id,
        credential_secret=given.credential_secret,
        credential_expires_at=given.expires_at,
        floating_ip_id=given.floating_ip_id,
    )
    if raw.get("server_id") == own:
        new["armed_at"] = raw.get("armed_at") or written_at
    else:
        new.update(server_id=own, armed_at=now)
        if new.get("billing_hour") == "rental":  # the new rental's hours count from about its creation
            new["rental_started_at"] = given.handed_at or now
    return new
