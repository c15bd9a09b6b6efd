"""The one door to the cloud: a login with the project's credentials, its token kept for the next command.

Every failure to log in, of whatever kind keystoneauth raises, is one CloudUnreachable line whose text never
shows an auth URL's secret; a login that lands in another project or region than the state's resources is one
ScopeElsewhere line, before the command that asked for it can take them for gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_rent.cloud import token_cache
from gpu_rent.project.errors import ConfigError, one_line
from gpu_rent.project.state import RUNTIME_DIR, STATE_FILE, TOKEN_FILE, Scope, State, StateStore

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
    """The project's login, its token kept in the runtime folder for the next command. Refused (ScopeElsewhere)
    when it lands in another project or region than the one the state records its resources in: every command
    that logs in comes through here, before it can act on what it sees there."""
    conn = login(settings.cloud, kept=settings.runtime_dir / TOKEN_FILE)
    refuse_elsewhere(StateStore(settings.project_dir).peek(), scope_of(conn), settings.cloud)
    return conn


class ScopeElsewhere(ConfigError):
    """The login reaches another project or region than the state's resources: a configuration to fix."""


def scope_of(conn) -> Scope:
    """Where this login lands: its token's project, and the region of the compute endpoint the SDK calls (the one
    configured, else the catalog's first, as keystoneauth picks it). No request: the token holds the catalog."""
    from keystoneauth1.exceptions import ClientException

    region = conn.config.get_region_name("compute") or None
    if region is None:
        try:
            catalog = conn.session.auth.get_access(conn.session).service_catalog
            interface = conn.config.get_interface("compute")
            region = catalog.endpoint_data_for(service_type="compute", interface=interface).region_name
        except ClientException:  # no compute in the catalog: no region to name (and none to call)
            region = None
    return Scope(conn.current_project_id, region or None)


def refuse_elsewhere(state: State | None, login: Scope, auth: CloudAuth) -> None:
    """ScopeElsewhere when the state records its resources in another project or region than login: there the
    cloud lists none of them, and status would say nothing bills and forget them, up would rent anew."""
    recorded = state.cloud if state is not None and state.resources else None
    if recorded is None or recorded == login:
        return
    differ = [part for part in ("project", "region") if _part(recorded, part) != _part(login, part)]
    where, what = auth.origin(differ[0])
    held = ", ".join(key.replace("_", " ") for key in state.resources if key != "floating_ip_address")
    back = " and ".join(f"{part} {_part(recorded, part) or '(none)'}" for part in differ)
    raise ScopeElsewhere(
        where,
        f"{what} logs in to {login}, but this folder's {held} are in {recorded} ({RUNTIME_DIR}/{STATE_FILE}): "
        f"refused, nothing forgotten; log in to {back} again, or end them from there first",
    )


def _part(scope: Scope, part: str) -> str | None:
    return scope.project_id if part == "project" else scope.region
