"""How status reaches its four lists, as openstacksdk last did, kept for the next status (.gpu-rent/cloud-route.json).

openstacksdk's import alone is about a third of a second, and status is read often: when a status has read the
cloud through the SDK, what the SDK's four requests were (each URL, the microversion headers it negotiated, the TLS
settings, the token and when it ends, the cloud's description, the project and region the login landed in) is kept
here, and the next status makes the same requests over plain HTTP (cloud_http.py) without loading the SDK at all.

The route is only as good as the configuration the SDK resolved it from. It is keyed by a salted hash of everything
that resolution reads: the CloudAuth (cloud, clouds.yaml, the OS_* options), the working folder, the installed
openstacksdk, the environment that decides where it looks for files, and the content (or absence) of every file
openstack.config would read. Anything changed, the key misses and status goes through the SDK again, which
writes a new route. Like token.json, the file is 0600; it holds the token, and the password only as part of
the salted hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_rent.cloud import token_cache
from gpu_rent.cloud.connect import scope_of
from gpu_rent.project.state import CLOUD_ROUTE_FILE as FILE
from gpu_rent.project.state import RUNTIME_DIR, Scope
from gpu_rent.util.atomic import write_atomically

if TYPE_CHECKING:
    from gpu_rent.project.env import CloudAuth


# status's four lists as cloud.observe asks openstacksdk for them: the proxy, the resource in its registry, and
# whether the list is the detailed one (/servers/detail, /volumes/detail)
CALLS = {
    "servers": ("compute", "server", True),
    "volumes": ("block_storage", "volume", True),
    "floating_ips": ("network", "floating_ip", False),
    "snapshots": ("block_storage", "snapshot", False),
}
# Where openstack.config looks for files follows these (platformdirs, the home folder); with verify on, requests
# takes its CA bundle from the last two. A change in any of them must be a miss.
ENVIRON = (
    "HOME",
    "USERPROFILE",
    "SNAP_REAL_HOME",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    # the proxies requests chose for each endpoint are kept in the route: a change of them must be a miss too
    *(name for proxy in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") for name in (proxy, proxy.upper())),
)


@dataclass(frozen=True)
class Call:
    """One list request: endpoint + path, the microversion headers the SDK sent, the body's key for the list."""

    endpoint: str
    path: str
    headers: dict[str, str]
    key: str
    proxies: dict[str, str]  # as requests (under the SDK) chose them for the endpoint; empty: straight there


@dataclass(frozen=True)
class Route:
    calls: dict[str, Call]  # CALLS' names
    token: str
    expires_at: float  # unix time
    verify: bool | str  # True, False, or the CA bundle requests verified with
    cert: str | list[str] | None  # a client certificate (and its key), as keystoneauth had it
    cloud: str  # CloudAuth.describe(), which status prints
    scope: Scope  # where the login landed: status refuses, as connect does, a state whose resources are elsewhere


# ---------------------------------------------------------------------------------------------- the SDK's side


def candidate_files(auth: CloudAuth) -> list[str]:
    """Every file openstack.config may read for this auth, in its order (CloudAuth.openstack_config's arguments):
    the given clouds.yaml or the usual ones, then the secure.yaml and clouds-public.yaml candidates."""
    from openstack.config import loader

    if not auth.cloud:  # OS_* values: load_yaml_config=False reads no file
        return []
    first = [str(auth.config_file)] if auth.config_file else list(loader.CONFIG_FILES)
    return [*first, *loader.SECURE_FILES, *loader.VENDOR_FILES]


def build(conn, cloud: str) -> Route:
    """The route of a connection that has just listed through the SDK (its microversions are negotiated)."""
    from keystoneauth1.session import Session  # the SDK's own rule for a microversion's headers
    from requests.utils import DEFAULT_CA_BUNDLE_PATH, get_environ_proxies

    calls = {}
    for name, (proxy_name, resource, details) in CALLS.items():
        proxy = getattr(conn, proxy_name)
        cls = proxy._resource_registry[resource]
        headers: dict[str, str] = {}
        microversion = cls._get_microversion(proxy)  # what the SDK's list sends: its maximum the cloud supports
        if microversion:
            Session._set_microversion_headers(headers, microversion, proxy.service_type, None)
        path = f"{cls.base_path}/detail" if details else cls.base_path
        endpoint = proxy.get_endpoint()
        # no_proxy as requests reads it (CIDR ranges too, which urllib does not know): the token goes where
        # the SDK's requests would have sent it, never through a proxy it would have passed by
        calls[name] = Call(endpoint, path, headers, cls.resources_key, dict(get_environ_proxies(endpoint)))
    session = conn.session
    # requests trusts REQUESTS_CA_BUNDLE over verify=True, then certifi's bundle: the CA file it really used
    verify = session.session.merge_environment_settings(calls["servers"].endpoint, {}, False, session.verify, None)
    verify = DEFAULT_CA_BUNDLE_PATH if verify["verify"] is True else verify["verify"]
    cert = list(session.cert) if isinstance(session.cert, tuple | list) else session.cert
    auth_ref = session.auth.auth_ref
    return Route(calls, auth_ref.auth_token, auth_ref.expires.timestamp(), verify, cert, cloud, scope_of(conn))


def keep(conn, auth: CloudAuth, cloud: str, runtime_dir: Path) -> None:
    """Write the route of this connection for the next status (atomically, 0600) into an existing runtime folder;
    when it cannot be made, no route is left (the next status goes through the SDK, as before routes).
    cloud: auth.describe(), as this status printed it."""
    path = runtime_dir / FILE
    if not runtime_dir.is_dir():  # only into a project's .gpu-rent/ (made private, with its .gitignore)
        return
    try:
        route = build(conn, cloud)
        files = candidate_files(auth)
    except Exception:  # e.g. an auth with no token to keep: the route only ever saves time
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError):
        write(route, auth, files, path)


def write(route: Route, auth: CloudAuth, files: list[str], path: Path) -> None:
    salt = os.urandom(16).hex()
    kept = {"salt": salt, "key": key(salt, auth, files), "files": files, **asdict(route)}
    write_atomically(path, json.dumps(kept), mode=0o600)


# ---------------------------------------------------------------------------------------------- status's side


def load(auth: CloudAuth, runtime_dir: Path) -> Route | None:
    """The kept route of this very configuration with a token that has life left; None sends status to the SDK."""
    kept = _kept(auth, runtime_dir)
    if kept is None:
        return None
    try:
        calls = {name: Call(**kept["calls"][name]) for name in CALLS}
        scope = Scope(**kept["scope"])  # a route kept before the scope was: KeyError, and the SDK path
        token, expires_at = kept["token"], float(kept["expires_at"])
        route = Route(calls, token, expires_at, kept["verify"], kept["cert"], kept["cloud"], scope)
    except (KeyError, TypeError, ValueError):
        return None
    if route.expires_at - time.time() < token_cache.MIN_LIFE_SECONDS:  # the SDK path logs in again
        return None
    return route


def fits(auth: CloudAuth, project_dir: Path) -> bool:
    """openstacksdk resolved this very configuration (nothing it reads has changed since) and it reached the cloud:
    config.load need not ask openstacksdk again whether it resolves."""
    return _kept(auth, project_dir / RUNTIME_DIR) is not None


def _kept(auth: CloudAuth, runtime_dir: Path) -> dict | None:
    try:
        kept = json.loads((runtime_dir / FILE).read_text(encoding="utf-8"))
        if not isinstance(kept, dict) or kept.get("key") != key(str(kept["salt"]), auth, list(kept["files"])):
            return None
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return kept


def key(salt: str, auth: CloudAuth, files: list[str]) -> str:
    """Everything openstacksdk's resolution of auth depends on, salted and hashed."""
    material = {
        "cloud": auth.cloud,
        "config_file": str(auth.config_file) if auth.config_file else None,
        "options": [list(option) for option in auth.options],  # holds the password with OS_* auth: hashed only
        "cwd": os.getcwd(),
        "openstacksdk": sdk_installed(),
        "environ": {name: os.environ.get(name) for name in ENVIRON},
        "files": {name: _content(name) for name in files},
    }
    return hashlib.sha256((salt + json.dumps(material, sort_keys=True)).encode()).hexdigest()


def _content(name: str) -> str | None:
    try:
        return hashlib.sha256(Path(name).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
    except OSError as e:  # unreadable, or a folder: openstack.config skips it, and so must a change to it show
        return f"unreadable: errno {e.errno}"


def sdk_installed() -> list[str]:
    """The installed openstacksdk, as pip records it beside the package (e.g. openstacksdk-4.14.0.dist-info):
    an upgrade renames it. importlib.metadata would tell the version too, for 25 ms of status's start."""
    spec = importlib.util.find_spec("openstack")
    if spec is None or not spec.origin:
        return []
    return sorted(p.name for p in Path(spec.origin).parent.parent.glob("openstacksdk-*.dist-info"))
