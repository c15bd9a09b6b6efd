"""The cloud token of the last command, kept for the next one (`.gpu-rent/token.json`, 0600).

Every command used to begin with a Keystone login; `status` asked for a new token each time, and a
cloud validates each new token on its first use by each service. keystoneauth can hand over its
state; a token with more than a few minutes left is used again, a refused one is replaced at once
(keystoneauth logs in again on a 401). The file is keyed by a salted hash of the whole login (cloud,
user, project, password): another login in `.env`, or a changed password, finds nothing and logs in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

# A kept token with less life than this is not used again: a fresh login costs little, and the watchdog
# (which renews 15 minutes before expiry) must not be handed one about to go.
MIN_LIFE_SECONDS = 1200


def _key(salt: str, auth: dict) -> str:
    """Who logs in where, with what: salted and hashed, so that the file names no one and holds no password."""
    return hashlib.sha256((salt + json.dumps(auth, sort_keys=True, default=str)).encode()).hexdigest()


def restore(plugin, path: Path, auth: dict) -> str | None:
    """Give the auth plugin the kept token of this very login, if there is one; the state it was given."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("key") != _key(str(kept["salt"]), auth) or not kept.get("state"):
            return None
        plugin.set_auth_state(kept["state"])
        if plugin.auth_ref.will_expire_soon(stale_duration=MIN_LIFE_SECONDS):
            plugin.set_auth_state(None)
            return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return kept["state"]


def keep(plugin, path: Path, auth: dict) -> None:
    """Write the plugin's token for the next command (atomically, 0600) into an existing runtime folder."""
    with contextlib.suppress(OSError, AttributeError, TypeError, ValueError):
        state = plugin.get_auth_state()
        if not state:
            return
        if not path.parent.is_dir():  # only into a project's .gpu-rent/ (made private, with its .gitignore)
            return
        salt = os.urandom(16).hex()
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"salt": salt, "key": _key(salt, auth), "state": state}, f)
        os.replace(tmp, path)
