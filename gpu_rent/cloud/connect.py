"""The one door to the cloud: a login with the project's credentials, its token kept for the next command.

Every failure to log in, of whatever kind keystoneauth raises, is one CloudUnreachable line whose text never
shows an auth URL's secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_rent.cloud import token_cache
from gpu_rent.project.errors import masked

if TYPE_CHECKING:
    from gpu_rent.project.settings import Settings


class CloudUnreachable(Exception):
    """Keystone did not answer or refused the credentials."""


def connect(settings: Settings):
    kept = settings.runtime_dir / token_cache.FILE
    try:
        conn = settings.cloud.connect()
        login = {**conn.config.config["auth"], "auth_type": conn.config.config.get("auth_type")}
        reused = token_cache.restore(conn.session.auth, kept, login)
        conn.authorize()
    except Exception as e:  # keystoneauth raises many kinds; all mean the same to the user
        raise CloudUnreachable(f"cannot reach the cloud ({settings.cloud.describe()}): {_short(e)}") from None
    if reused is None or conn.session.auth.get_auth_state() != reused:  # a new login: keep it for the next
        token_cache.keep(conn.session.auth, kept, login)
    return conn


def _short(e: Exception) -> str:
    text = masked(" ".join(str(e).split()))  # openstacksdk's errors quote the auth URL
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__
