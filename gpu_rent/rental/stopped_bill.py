"""What still bills while the project's server stands stopped, in one line for `status` and `up`.

A preemption stops the VM with its idle-killer on it, and with the laptop closed nothing else looks:
the floating IP and the disks bill on until a command ends them. Selectel's rules
(docs.selectel.ru, cloud servers "payment" and "preemptible servers"): a preempted server goes to
EXPIRED and its vCPU, RAM and GPU stop billing from the next hour, public IPs and network disks go
on; a frozen (shelved) server bills no compute either; a server shut off or suspended bills in full. A
server in ERROR runs nothing and stands until deleted: said to bill, as nothing says it does not.
`line` is pure (the server's status, the time it changed, the prices); `for_server` feeds it from
one look at the cloud and gpu-rent.vars.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gpu_rent.cloud import view as cloud
from gpu_rent.project.settings import Settings, resource_names

# stopped, compute no longer billed (Selectel: from the next hour)
NO_COMPUTE = frozenset({"SHELVED", "SHELVED_OFFLOADED", "EXPIRED"})
# stopped, yet the server bills in full
FULL_COMPUTE = frozenset({"SHUTOFF", "SUSPENDED", "PAUSED"})
# failed: nothing runs, and Nova keeps the server (its disks attached) until it is deleted; whether the cloud bills
# its compute then is the cloud's own rule, which gpu-rent does not know: counted as billing, said as may
FAILED = frozenset({"ERROR"})


@dataclass(frozen=True)
class Prices:
    server: float | None = None  # PRICE_PER_HOUR
    floating_ip: float | None = None  # PRICE_FLOATING_IP_PER_HOUR
    disk_gb: float | None = None  # PRICE_DISK_GB_PER_HOUR


def line(status: str, since: float | None, address: str | None, disk_gb: int, prices: Prices, now: float) -> str | None:
    """ "preempted at 02:10, nothing on it runs; still billing: floating IP ..., disks 150 GB, ~0.42/hour
    (~2.52 since)", or None when the server is not standing stopped."""
    status = status.upper()
    if status not in NO_COMPUTE | FULL_COMPUTE | FAILED:
        return None
    bills: list[tuple[str, float | None, str]] = []  # what, its price per hour, the key that prices it
    if status in FULL_COMPUTE:
        bills.append((f"the server itself ({status} bills in full)", prices.server, "PRICE_PER_HOUR"))
    if status in FAILED:
        bills.append(("the server itself (in ERROR it may bill until deleted)", prices.server, "PRICE_PER_HOUR"))
    if address:
        bills.append((f"floating IP {address}", prices.floating_ip, "PRICE_FLOATING_IP_PER_HOUR"))
    if disk_gb:
        per_gb = None if prices.disk_gb is None else prices.disk_gb * disk_gb
        bills.append((f"disks {disk_gb} GB", per_gb, "PRICE_DISK_GB_PER_HOUR"))
    head = "preempted (stopped by the cloud)" if status in NO_COMPUTE else f"stopped ({status})"
    head = "failed (ERROR)" if status in FAILED else head
    when = f" at {time.strftime('%H:%M', time.localtime(since))}" if since else ""
    text = f"{head}{when}, nothing on it runs; still billing: {', '.join(b[0] for b in bills) or 'nothing known'}"
    missing = sorted({key for _, price, key in bills if price is None})
    if missing:
        return f"{text} (set {' and '.join(missing)} in gpu-rent.vars to see what it costs)"
    per_hour = sum(price for _, price, _ in bills if price is not None)
    if since is None or now < since:
        return f"{text}, ~{per_hour:.2f}/hour"
    hours = int((now - since) // 3600) + 1  # billed by the hour: a started hour counts
    return f"{text}, ~{per_hour:.2f}/hour (~{per_hour * hours:.2f} since)"


def for_server(settings: Settings, view: cloud.CloudView, server: cloud.Server, address: str | None) -> str | None:
    """What still bills while our server stands stopped, priced by gpu-rent.vars (None: it runs)."""
    names = resource_names(settings.name)
    disk_gb = sum(v.size for v in view.volumes if v.name in (names["boot_volume"], names["data_volume"]))
    prices = Prices(settings.price_per_hour, settings.price_floating_ip_per_hour, settings.price_disk_gb_per_hour)
    return line(server.status, cloud.unix_time(server.updated), address, disk_gb, prices, time.time())
