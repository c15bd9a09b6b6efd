"""Who may reach SSH on the VM, as `gpu-rent setup` settles OPERATOR_CIDR once the login is known.

OPERATOR_CIDR=auto is config's: the address this machine reaches the cloud's Keystone from, when that is public.
Behind a home router it is private (NAT) and `up` would refuse, so setup finds out first, with config's own verdict:
when auto resolves, OPERATOR_CIDR stays as the project has it; when not, the user gives the address (the option, or
asked), checked here. A private address is taken only when the cloud itself is on a private network, as the test
ground is (its Keystone on 127.0.0.1, its VMs seeing this machine as 10.231.7.1): on the internet the cloud sees a
router's public address, never a private one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from gpu_rent.project import settings as config
from gpu_rent.project.env import CloudAuth
from gpu_rent.project.errors import ConfigError
from gpu_rent.setup.login import WHERE

OPTION = "--operator-cidr"
AUTO = "auto"
WHERE_TO_LOOK = "your router's public address is shown by e.g. https://ifconfig.me or your router's page"


@dataclass(frozen=True)
class Reach:
    """How this machine reaches the cloud: the route to its Keystone."""

    host: str  # Keystone's host, as its URL names it
    auto: str | None  # what OPERATOR_CIDR=auto resolves to; None: it does not
    local: ipaddress.IPv4Address | None  # this machine's address on the route; None: no route
    cloud: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # Keystone's; None: unknown (no route to a name)

    @property
    def private_cloud(self) -> bool:
        """The cloud is on a private network too: its VMs may well see this machine from a private address."""
        return self.cloud is not None and not self.cloud.is_global

    def situation(self) -> str:
        """Why auto does not resolve, e.g. `this machine reaches the cloud from 192.168.1.20, a private address`."""
        if self.local is None:
            return f"this machine has no route to {self.host}"
        kind = "a loopback address" if self.local.is_loopback else "a private address"
        return f"this machine reaches the cloud from {self.local}, {kind}"

    def wanted(self) -> str:
        """What address the user is to give."""
        if self.private_cloud:
            return f"the address its VMs see this machine from (the cloud, at {self.cloud}, is on a private network)"
        return f"your public address ({WHERE_TO_LOOK})"


def of_url(auth_url: str, route: Callable[[str], tuple] | None = None) -> Reach:
    """The route to the Keystone of auth_url, and config's verdict on auto for it (route: config.route_to)."""
    host = config.url_host(auth_url)
    try:
        auto = config.auto_operator_cidr(host, route)
    except ConfigError:
        auto = None
    try:
        local, cloud = (route or config.route_to)(host)
    except OSError:
        local, cloud = None, _literal(host)
    return Reach(host, auto, local, cloud)


def of_login(auth: CloudAuth) -> Reach:
    """The route to the Keystone the login went to."""
    return of_url(str(auth.region().config["auth"].get("auth_url") or ""))


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class Refused(ValueError):
    """Why a value cannot be OPERATOR_CIDR, for the caller to name the option (or, at a prompt, not)."""


def as_cidr(value: str, reach: Reach) -> str:
    """The value as OPERATOR_CIDR: a bare address becomes a /32 (IPv6: /128); `auto` only when auto resolves here.

    Refused: what could never be the address the VM sees this machine from.
    """
    value = value.strip()
    if value.lower() == AUTO:
        if reach.auto is None:
            raise Refused(f"auto cannot find your address here: {reach.situation()}")
        return AUTO
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise Refused("not an IP address or network (an IPv4 or IPv6 address, or ADDRESS/PREFIX)") from None
    first = network.network_address
    if network.prefixlen == 0 or first.is_unspecified:
        raise Refused("every address: SSH to the VM would be open to anyone")
    if first.is_loopback:
        raise Refused("a loopback address: this machine as it sees itself, never as the VM sees it")
    if first.is_multicast:
        raise Refused("a multicast address, not a machine's")
    if not first.is_global and not reach.private_cloud:
        raise Refused(f"a private address: the cloud sees this machine from its router's address ({WHERE_TO_LOOK})")
    return str(network)


def checked(value: str, reach: Reach) -> str:
    """--operator-cidr as OPERATOR_CIDR; a refusal is one line naming the option."""
    try:
        return as_cidr(value, reach)
    except Refused as e:
        raise ConfigError(WHERE, f"{OPTION} {value}: {e}") from None


def kept(existing: str | None) -> bool:
    """The project's OPERATOR_CIDR is a value of the user's own (not auto): a re-run keeps it."""
    return bool(existing) and existing.lower() != AUTO


def settle(reach: Reach, given: str | None, existing: str | None) -> str | None:
    """The non-interactive answer: OPERATOR_CIDR to write, or None to leave the project's line as it is (auto
    resolves, or the project has an address of its own); without either, --operator-cidr is required."""
    if given:
        return checked(given, reach)
    if reach.auto is not None or kept(existing):
        return None
    raise ConfigError(
        WHERE,
        f"{OPTION} is required: {reach.situation()}, so OPERATOR_CIDR=auto cannot find your address; "
        f"give {reach.wanted()} as {OPTION} ADDRESS",
    )


def question(reach: Reach) -> str:
    """The prompt's question, saying why it is asked and where to look."""
    if reach.private_cloud:
        return (
            f"Your IP address as the cloud's VMs see it, for SSH to the VM ({reach.situation()}; the cloud, at "
            f"{reach.cloud}, is on a private network too, so a private address is fine)"
        )
    return f"Your public IP address, for SSH to the VM ({reach.situation()}; {WHERE_TO_LOOK})"
