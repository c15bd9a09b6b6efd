"""A project's configuration as one frozen object: `gpu-rent.vars` (keys.py) and `.env` (env.py) loaded together.

The vars plugin and the CLI share `load`; OPERATOR_CIDR=auto is resolved here for up, the plugin and setup.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from gpu_rent.project import llm_models, seed_list, text_file
from gpu_rent.project.env import ENV_FILE, ENV_KEYS, CloudAuth, KnownCloud, cloud_auth, merged_env, read_env, ssh_key
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.keys import VARS_FILE, read_vars
from gpu_rent.project.state import RUNTIME_DIR

if TYPE_CHECKING:
    pass

# --- the settings object ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    project_dir: Path
    pool: str
    pool_fallback: tuple[str, ...]
    flavor: str
    flavor_fallback: tuple[str, ...]
    image: str
    volume_type: str | None
    boot_volume_gb: int
    data_volume_gb: int
    idle_minutes: int
    idle_grace_minutes: int
    idle_gpu_percent: int | None
    idle_hung_minutes: int | None
    idle_shell: bool
    idle_llm: bool
    keep_alive_command: str | None
    billing_hour: str
    local_port: int
    remote_port: int
    llm_runtime: str
    llm_local_port: int
    llm_remote_port: int
    llm_release_url: str | None
    pull_output: bool
    keep_floating_ip: bool
    push_folders: tuple[tuple[str, str], ...]
    operator_cidr: str
    ssh_user: str
    price_per_hour: float | None
    price_floating_ip_per_hour: float | None
    price_disk_gb_per_hour: float | None
    name: str
    external_network: str | None
    subnet_cidr: str
    swarmui_repo: str
    swarmui_version: str
    require_gpu: bool
    ssh_key: Path
    cloud: CloudAuth | None  # None only for load(with_cloud=False), where the caller brings the auth
    civitai_token: str | None = field(default=None, repr=False)
    # seed.yml, checked: {"extensions": [...], "autocomplete": [...], "models": [...]}
    seed: dict = field(default_factory=lambda: {"extensions": [], "autocomplete": [], "models": []}, hash=False)
    # ollama-models.yaml, checked: LLM_RUNTIME's own part (llm_models.load); empty with LLM_RUNTIME=none
    llm_models: list = field(default_factory=list, hash=False)

    @property
    def runtime_dir(self) -> Path:
        return self.project_dir / RUNTIME_DIR

    def flavors(self) -> tuple[str, ...]:
        """FLAVOR, then FLAVOR_FALLBACK, each once, in order of preference."""
        return tuple(dict.fromkeys((self.flavor, *self.flavor_fallback)))

    def pools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.pool, *self.pool_fallback)))

    def ssh_public_key(self) -> str:
        """The public half of the SSH key; checked only here so that e.g. `status` works without a key."""
        key = self.ssh_key
        public = key.with_name(key.name + ".pub")
        prefix = f"GPU_RENT_SSH_KEY={key}"
        try:
            text = text_file.read(public)
        except text_file.Unreadable as e:  # one line of ASCII when it is a key: a line number would add nothing
            raise ConfigError(ENV_FILE, f"{prefix}: {public} {e.problem}") from None
        # An agent-held key (no private file here) is fine as long as the .pub is present.
        if text is not None:
            text = text.strip()
            if not text:
                raise ConfigError(ENV_FILE, f"{prefix}: {public} is empty (ssh-keygen -y -f {key} > {public})")
            return text
        if key.is_file():
            raise ConfigError(ENV_FILE, f"{prefix}: {public} not found (ssh-keygen -y -f {key} > {public})")
        raise ConfigError(ENV_FILE, f"{prefix}: {key} not found (ssh-keygen -t ed25519 -f {key})")

    def ansible_vars(self) -> dict[str, Any]:
        """Every setting as `gpu_rent_<field>`, in types YAML/JSON can carry."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "cloud":
                if value is not None:
                    out["gpu_rent_cloud_auth"] = value.ansible_params()
                continue
            if f.name == "seed":  # one variable per part, as the seed role reads them
                for part, items in value.items():
                    out[f"gpu_rent_seed_{part}"] = items
                continue
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Path):
                value = str(value)
            out[f"gpu_rent_{f.name}"] = value
        try:
            out["gpu_rent_ssh_public_key"] = self.ssh_public_key()
        except ConfigError:
            # Playbooks that need the key check for None; read-only ones must not fail over it.
            out["gpu_rent_ssh_public_key"] = None
        out["gpu_rent_flavors"] = list(self.flavors())
        out["gpu_rent_pools"] = list(self.pools())
        out["gpu_rent_runtime_dir"] = str(self.runtime_dir)
        out["gpu_rent_names"] = resource_names(self.name)
        return out

    def resolved_operator_cidr(self) -> str:
        """OPERATOR_CIDR, with "auto" resolved to the address this machine reaches the cloud from. Every address
        is refused here, for up, as the security_group role refuses it but before up's head start may create the
        server; not by the loader, so that stop and status still work in a project that says it."""
        if self.operator_cidr != "auto":
            if ipaddress.ip_network(self.operator_cidr).prefixlen == 0:
                raise ConfigError(
                    VARS_FILE,
                    f"OPERATOR_CIDR={self.operator_cidr} is every address: SSH open to the world is refused "
                    "(auto, or your address such as 203.0.113.7/32)",
                    key="OPERATOR_CIDR",
                )
            return self.operator_cidr
        if self.cloud is None:
            raise ConfigError(VARS_FILE, "OPERATOR_CIDR=auto needs the cloud's address; set OPERATOR_CIDR")
        return auto_operator_cidr(url_host(str(self.cloud.region().config["auth"].get("auth_url", ""))))


# --- OPERATOR_CIDR=auto: here for up and the vars plugin, and for setup, which settles OPERATOR_CIDR with it --------


def url_host(url: str) -> str:
    return urlparse(url).hostname or ""


def route_to(host: str) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    """This machine's address on its route to host, and host's address; OSError when there is no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 443))  # UDP: nothing is sent, the kernel only picks the route
        return ipaddress.ip_address(s.getsockname()[0]), ipaddress.ip_address(s.getpeername()[0])


def auto_operator_cidr(host: str, route: Callable[[str], tuple] | None = None) -> str:
    """OPERATOR_CIDR=auto resolved: the address this machine reaches host (the cloud's Keystone) from, when public.

    route: route_to unless given (tests); looked up when called, so one stand-in serves config and setup alike.
    """
    try:
        address = (route or route_to)(host)[0]
    except OSError as e:
        raise ConfigError(VARS_FILE, f"OPERATOR_CIDR=auto: no route to {host} ({e}); set OPERATOR_CIDR") from None
    if not address.is_global:
        raise ConfigError(
            VARS_FILE,
            f"OPERATOR_CIDR=auto: this machine reaches the cloud from {address}, a private address (NAT): "
            "set OPERATOR_CIDR to your public address, e.g. OPERATOR_CIDR=203.0.113.7/32",
            key="OPERATOR_CIDR",
        )
    return f"{address}/32"


def resource_names(prefix: str) -> dict[str, str]:
    """Every cloud resource's name, from NAME: the one place roles, status and dry-run take them from."""
    return {
        "server": prefix,
        "boot_volume": f"{prefix}-boot",
        "data_volume": f"{prefix}-data",
        "floating_ip_description": f"gpu-rent {prefix}",
        "keypair": f"{prefix}-key",
        "security_group": f"{prefix}-ssh",
        "snapshot": f"{prefix}-boot-ok",
        "idle_killer_credential": f"{prefix}-idle-killer",
        "network_prefix": f"{prefix}-net-",
        "subnet_prefix": f"{prefix}-subnet-",
        "router_prefix": f"{prefix}-router-",
    }


def load(project_dir: Path, *, with_cloud: bool = True, known_cloud: KnownCloud | None = None) -> Settings:
    """Read and check `<project_dir>/gpu-rent.vars` and `.env`; raise ConfigError on the first problem.

    with_cloud=False skips resolving the cloud auth: the vars plugin gets it from the CLI's auth file.
    known_cloud(auth, project_dir) true: openstacksdk resolved this very auth before, from files unchanged since
    (status's kept route, cloud_route.fits), so it is not loaded to check it again.
    """
    project_dir = Path(project_dir).expanduser().resolve()
    values = read_vars(project_dir)
    try:
        models = llm_models.load(project_dir, values["LLM_RUNTIME"])
    except llm_models.ModelsFileError as e:
        raise ConfigError(e.file, e.message, line=e.line) from None
    file_env = read_env(project_dir)
    if with_cloud:
        env = merged_env(file_env, os.environ)
        cloud = cloud_auth(env, file_env, project_dir, known_cloud, shell=os.environ)
    else:
        env = {**{k: v for k, v in os.environ.items() if k in ENV_KEYS}, **(file_env or {})}
        cloud = None
    return Settings(
        project_dir=project_dir,
        **{key.lower(): value for key, value in values.items()},
        ssh_key=ssh_key(env, project_dir),
        cloud=cloud,
        civitai_token=env.get("CIVITAI_TOKEN"),
        seed=seed_list.load(project_dir),
        llm_models=models,
    )
