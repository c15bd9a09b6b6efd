"""The one door to the cloud: a login with the project's credentials, its token kept for the next command.

Every failure to log in, of whatever kind keystoneauth raises, is one CloudUnreachable line whose text never
shows an auth URL's secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_rent.cloud import token_cache
from gpu_rent.project.errors import one_line
from gpu_rent.project.state import TOKEN_FILE

if TYPE_CHECKING:
    from gpu_rent.project.env import CloudAuth
    from gpu_rent.project.settings import Settings


class CloudUnreachable(Exception):
    """Keystone did not answer or refused the credentials.

    said: what the login's error said, on one line, masked and with the login's secrets blanked out;
    kind: its type's name. A caller words the line its own way from these."""

    def __init__(self, message: str, *, said: str = "", kind: str = ""):
        super().__init__(message)
        self.said, self.kind = said, kind


def login(auth: CloudAuth, *, kept: Path | None = None, secrets: Iterable[str] = ()):
    """The laptop's one Keystone login: every failure is one CloudUnreachable that never shows a secret.

    kept: where the project keeps its token (token_cache); a token still valid there saves the login, and a
    new one is kept. None: a fresh login whatever is kept (doctor and setup prove the credentials)."""
    try:
        conn = auth.connect()
        if kept is not None:
            keyed = {**conn.config.config["auth"], "auth_type": conn.config.config.get("auth_type")}
            reused = token_cache.restore(conn.session.auth, kept, keyed)
        conn.authorize()
    except Exception as e:  # keystoneauth raises many kinds; all mean the same to the user
        said = one_line(e, secrets)
        why = f"{type(e).__name__}: {said[:300]}" if said else type(e).__name__
        raise CloudUnreachable(
            f"cannot reach the cloud ({auth.describe()}): {why}", said=said, kind=type(e).__name__
        ) from None
    if kept is not None and (reused is None or conn.session.auth.get_auth_state() != reused):  # a new login
        token_cache.keep(conn.session.auth, kept, keyed)
    return conn


def connect(settings: Settings):
    """The project's login, its token kept in the runtime folder for the next command."""
    return login(settings.cloud, kept=settings.runtime_dir / TOKEN_FILE)
