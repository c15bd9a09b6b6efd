"""What the idle-killer costs: billed GPU-hours against an oracle and against SkyPilot's and dstack's idle timers,
on the same week-long usage traces (goal: BILLING_HOUR=clock <= 1.10x the oracle under Selectel's clock hours,
with no more waits for a GPU than the best of the anchors' timers). Needs no cloud.

Usage (from the repository root):
    .venv/bin/python bench/idle_tax.py [--warm-up SECONDS] [--write-traces]

The traces are bench/traces/*.json (bench/_traces.py made them, seeded, and says where each shape comes from;
--write-traces writes them anew). Each policy replays each trace from a week with no VM:
- at work with no VM the user rents one; it is billed from then, and the user waits the warm-up, which
  bench/warm_up.py measures (a warm `up`: the killer keeps the volumes, so no re-rent after it is cold) and
  leaves for this bench in the same `make bench` run; run alone, this bench takes its last figure, 19.3 s on
  the test ground, and says which (--warm-up sets another: the ratios barely move up to 300 s);
- gpu-rent: the VM's own decision, gpu_rent/on_vm/idle_decision.decide, ticked as the timer ticks it (every
  60 s from boot; booted_at is the first tick's, as the status file in /run has it; a deadline before the next
  tick is waited for, as idle_killer.main does), with the Limits its config gives (IDLE_MINUTES=30,
  IDLE_GRACE_MINUTES=15, the cap twice IDLE_MINUTES, IDLE_GPU_PERCENT=10, a 180 s margin, rental hours from the
  server's creation) and a fresh Memory per VM. Work is a `live_gens` counter of 1 and a GPU at 97 %; idle is
  neither, with our ComfyUI backend running;
- SkyPilot's autostop (sky/skylet/events.py AutostopEvent): checked every 60 s (EVENT_INTERVAL_SECONDS); the
  idle timer restarts when autostop is set at launch, at a check that finds a job pending or running, and when
  a job is submitted; it stops when (now - last active) // 60 >= idle minutes. Its default is 5 minutes
  (docs.skypilot.co/en/latest/reference/auto-stop.html: "autostop: true  # Stop after default idle minutes
  (5)", and `sky autostop` without -i);
- dstack's idle_duration: its server checks each instance about every 7 s (InstancePipeline
  min_processing_interval) and terminates an idle one when now - (last_job_processed_at or created_at) >
  idle_duration (pipeline_tasks/instances/check.py, get_instance_idle_duration). Its default is 5m for a run's
  instances and 3d for a fleet made by hand (core/models/profiles.py DEFAULT_RUN_TERMINATION_IDLE_TIME,
  DEFAULT_FLEET_TERMINATION_IDLE_TIME; "Defaults to `5m` for runs and `3d` for fleets"): 5m is the anchor;
- an oracle per billing rule that knows the future: after each burst it deletes the VM when the next work is
  far enough that the re-rent (its warm-up billed, the work that much later) bills less under that rule than
  keeping the VM through the gap, and keeps it otherwise (a tie keeps: no wait). Decided gap by gap, as issue
  40 defines it; a search over every keep-or-delete choice (run once, not kept) bills the same 138 Selectel
  hours on these traces.
A delete is taken as instant for every policy (the server's last seconds are the same for all). It prints the
table per policy and billing rule, Selectel's hours per trace, and, when the goal is missed, which BILLING_HOUR,
IDLE_MINUTES and IDLE_GRACE_MINUTES would meet it on the same traces; one bench line per gpu-rent mode's
Selectel ratio (the goal's bar for all three) and one for the waits.

Billing rules, each applied to a trace's rentals:
- Selectel: each clock hour in which a server existed, billed whole, once however many rentals touched it
  ("every astronomical hour ... for quota resources the maximum consumption per hour is taken into account";
  docs.selectel.ru/en/cloud-servers/about/payment, shared/research/selectel.md);
- per minute: each rental in whole minutes begun (Lambda: "billed in one-minute increments",
  docs.lambdalabs.com/cloud/on-demand-instance-invoicing/; Scaleway's GPU Instances per minute, its docs'
  pages/instances/faq.mdx);
- per second: each rental to the second with a 60 s minimum (AWS EC2, aws.amazon.com/about-aws/whats-new/
  2017/10/announcing-amazon-ec2-per-second-billing/).
"""

from __future__ import annotations

import argparse
import math
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from bench import _traces
from bench._report import left, report
from gpu_rent.on_vm.idle_decision import DELETE, Memory, Observation, decide
from gpu_rent.on_vm.idle_killer import Config
from gpu_rent.project.keys import KEYS

TICK = 60.0  # the killer's timer (idle_killer_tick_seconds)
HOUR, DAY = 3600.0, 86400.0
WARM_UP_LAST = 19.3  # seconds: bench/warm_up.py's warm `up` on the test ground, its last run before this bench
# the product's defaults, as a project folder without the keys gets them
IDLE_MINUTES, GRACE_MINUTES = KEYS["IDLE_MINUTES"].default, KEYS["IDLE_GRACE_MINUTES"].default
SKYPILOT_DEFAULT, SKYPILOT_CHECK = 5, 60.0
DSTACK_DEFAULT, DSTACK_CHECK = 5, 7.0
GOAL = 1.10
console = Console(width=None if sys.stdout.isatty() else 120)  # as run_all's

Rentals = list[tuple[float, float]]


# ------------------------------------------------------------------ billing rules
def clock_hours(rentals: Rentals) -> float:
    """Selectel: every clock hour a server existed in, whole, once (the hour's peak: one GPU)."""
    hours = set()
    for start, end in rentals:
        if end > start:
            hours.update(range(int(start // HOUR), math.ceil(end / HOUR)))
    return len(hours) * HOUR


def per_minute(rentals: Rentals) -> float:
    return sum(math.ceil((end - start) / 60) * 60 for start, end in rentals)


def per_second(rentals: Rentals) -> float:
    return sum(max(end - start, 60.0) for start, end in rentals)


RULES: dict[str, Callable[[Rentals], float]] = {"Selectel": clock_hours, "per minute": per_minute,
                                                 "per second": per_second}  # fmt: skip


# ------------------------------------------------------------------ the work, as users get it
class Work:
    """A trace's work: disjoint (start, end) spans in unix time. A rent makes its span wait for the warm-up."""

    def __init__(self, spans):
        self.spans = [(float(a), float(b)) for a, b in spans]
        self.starts = [a for a, _ in self.spans]

    @property
    def end(self) -> float:
        return self.spans[-1][1]

    def wait_for_gpu(self, index: int, seconds: float) -> None:
        """The span rented for starts seconds later, and lasts as long; work it now runs into joins it."""
        start, end = self.spans[index]
        end += seconds
        later = index + 1
        while later < len(self.spans) and self.spans[later][0] < end:
            end = max(end, self.spans[later][1])
            later += 1
        self.spans[index:later] = [(start + seconds, end)]
        self.starts = [a for a, _ in self.spans]

    def first_from(self, moment: float) -> int:
        """The first span that starts at or after moment."""
        return bisect_left(self.starts, moment)

    def busy(self, moment: float) -> bool:
        i = bisect_right(self.starts, moment) - 1
        return i >= 0 and moment < self.spans[i][1]

    def last_start(self, moment: float) -> float:
        i = bisect_right(self.starts, moment) - 1
        return self.spans[i][0] if i >= 0 else -math.inf

    def last_end(self, moment: float) -> float:
        """When the last work that ended by moment ended."""
        i = bisect_right(self.starts, moment) - 1
        if i >= 0 and self.spans[i][1] > moment:
            i -= 1
        return self.spans[i][1] if i >= 0 else -math.inf


# A keeper says when the VM rented at `at` is deleted: (work, at, rentals before, warm-up) -> when.
Keeper = Callable[[Work, float, Rentals, float], float]


@dataclass
class Outcome:
    rentals: Rentals = field(default_factory=list)
    waited: float = 0.0  # seconds users waited for a GPU

    @property
    def rerents(self) -> int:
        return max(len(self.rentals) - 1, 0)


def replay(spans, keeper: Keeper, warm_up: float) -> Outcome:
    """A week from no VM: a rent at each work that finds none, the keeper's delete, the next work's rent."""
    work, out = Work(spans), Outcome()
    index = 0
    while index < len(work.spans):
        at = work.spans[index][0]
        work.wait_for_gpu(index, warm_up)
        out.waited += warm_up
        gone = keeper(work, at, list(out.rentals), warm_up)
        assert not work.busy(gone), f"deleted at work, {gone}"
        out.rentals.append((at, gone))
        index = work.first_from(gone)
    return out


# ------------------------------------------------------------------ policies
def observe(work: Work, now: float, booted_at: float) -> Observation:
    """What a tick sees: work is a generation live and a busy GPU; idle, neither; our backend runs."""
    busy = work.busy(now)
    counters = {"waiting_gens": 0, "live_gens": int(busy), "waiting_backends": 0, "loading_models": 0}
    status = {"status": counters, "backend_status": {"status": "running"}}
    gpus = ((0, 97.0 if busy else 0.0, 20480.0),)  # (index, utilisation %, memory MiB): ComfyUI keeps its model
    return Observation(now=now, booted_at=booted_at, status=status, backends=("running",), gpus=gpus)


def gpu_rent(billing_hour: str = "off", idle_minutes: float = IDLE_MINUTES, grace_minutes: float = GRACE_MINUTES
             ) -> Keeper:  # fmt: skip
    """The VM's own decision, ticked as idle_killer's timer and main() tick it."""

    def keeper(work: Work, at: float, _before: Rentals, _warm_up: float) -> float:
        # the killer's own config turned into Limits, as a tick does: IDLE_GPU_PERCENT and the margin its defaults
        config = Config(server_id="bench", auth_url="", credential_id=None, credential_secret=None,
                        idle_seconds=idle_minutes * 60, grace_seconds=grace_minutes * 60,
                        cap_seconds=2 * idle_minutes * 60, billing_hour=billing_hour, rental_started_at=at)  # fmt: skip
        limits = config.limits()
        booted = now = at + TICK  # OnBootSec: the first tick, which writes booted_at into the status file
        memory, horizon = Memory(), work.end + DAY
        while now < horizon:
            decision = decide(observe(work, now, booted), limits, memory)
            memory = decision.memory
            if decision.action == DELETE:
                return now
            fires = decision.fires_at
            if fires is not None and 0 < fires - now <= TICK:  # idle_killer.main waits for it and looks again
                decision = decide(observe(work, fires, booted), limits, memory)
                memory = decision.memory
                if decision.action == DELETE:
                    return fires
            now += TICK
        return horizon

    return keeper


def skypilot(idle_minutes: int) -> Keeper:
    """AutostopEvent: a check every 60 s; the timer restarts at launch, at a job submitted, at a check that
    finds one pending or running; it fires at (now - last active) // 60 >= idle minutes."""

    def keeper(work: Work, at: float, _before: Rentals, _warm_up: float) -> float:
        last_active, now = at, at + SKYPILOT_CHECK
        while now < work.end + DAY:
            if work.busy(now):
                last_active = now
            else:
                last_active = max(last_active, work.last_start(now))
                if (now - last_active) // 60 >= idle_minutes:
                    return now
            now += SKYPILOT_CHECK
        return now

    return keeper


def dstack(idle_minutes: int) -> Keeper:
    """The server's instance check, about every 7 s: an instance with no job idle since its last job ended (or
    its creation) for longer than idle_duration is terminated."""

    def keeper(work: Work, at: float, _before: Rentals, _warm_up: float) -> float:
        now = at + DSTACK_CHECK
        while now < work.end + DAY:
            if not work.busy(now) and now - max(at, work.last_end(now)) > idle_minutes * 60:
                return now
            now += DSTACK_CHECK
        return now

    return keeper


def oracle(rule: Callable[[Rentals], float]) -> Keeper:
    """Knows the future: after each span, deletes when a re-rent at the next one (its warm-up billed and the
    work that much later) bills less under rule than keeping the VM through the gap; a tie keeps."""

    def keeper(work: Work, at: float, before: Rentals, warm_up: float) -> float:
        span = work.first_from(at)
        while span + 1 < len(work.spans):
            end, (start, until) = work.spans[span][1], work.spans[span + 1]
            kept = rule([*before, (at, until)])
            if rule([*before, (at, end), (start, until + warm_up)]) < kept:
                return end
            span += 1
        return work.spans[span][1]

    return keeper


ANCHORS = {
    f"SkyPilot autostop {SKYPILOT_DEFAULT} min (default)": skypilot(SKYPILOT_DEFAULT),
    "SkyPilot autostop 30 min": skypilot(30),
    f"dstack idle_duration {DSTACK_DEFAULT}m (default)": dstack(DSTACK_DEFAULT),
    "dstack idle_duration 30m": dstack(30),
}
ORACLES = {f"oracle ({name})": oracle(rule) for name, rule in RULES.items()}
CLOCK = "gpu-rent BILLING_HOUR=clock"


def policies() -> dict[str, Keeper]:
    ours = {f"gpu-rent BILLING_HOUR={mode}": gpu_rent(mode) for mode in ("off", "clock", "rental")}
    return {**ours, **ANCHORS, **ORACLES}


# ------------------------------------------------------------------ the week's sums
@dataclass
class Sums:
    billed: dict[str, float]  # rule -> seconds over every trace
    rerents: int
    waited: float
    per_trace: dict[str, float]  # trace -> Selectel seconds


def run(traces: list[dict], keeper: Keeper, warm_up: float) -> Sums:
    sums = Sums({rule: 0.0 for rule in RULES}, 0, 0.0, {})
    for trace in traces:
        spans = [(trace["week_start"] + a, trace["week_start"] + b) for a, b in trace["work"]]
        out = replay(spans, keeper, warm_up)
        for name, rule in RULES.items():
            sums.billed[name] += rule(out.rentals)
        sums.per_trace[trace["name"]] = clock_hours(out.rentals)
        sums.rerents += out.rerents
        sums.waited += out.waited
    return sums


def goal(results: dict[str, Sums], name: str) -> tuple[float, float]:
    """(Selectel GPU-hours against the oracle's, waits against the fewest of the anchors' timers)."""
    ratio = results[name].billed["Selectel"] / results["oracle (Selectel)"].billed["Selectel"]
    best = min(results[anchor].waited for anchor in ANCHORS)
    return ratio, results[name].waited / best


def table(results: dict[str, Sums], warm_up: float) -> Table:
    out = Table(title=f"idle tax: GPU-hours billed in a week of {len(_traces.SHAPES)} traces, x that rule's oracle "
                f"({warm_up:.1f} s warm-up)")  # fmt: skip
    out.add_column("policy", no_wrap=True)
    for rule in RULES:
        out.add_column(rule, justify="right", no_wrap=True)
    out.add_column("re-rents", justify="right")
    out.add_column("waited", justify="right", no_wrap=True)
    for name, sums in results.items():
        cells = []
        for rule in RULES:
            oracle_hours = results[f"oracle ({rule})"].billed[rule]
            cells.append(f"{sums.billed[rule] / HOUR:5.1f} h {sums.billed[rule] / oracle_hours:4.2f}x")
        out.add_row(
            name, *cells, str(sums.rerents), f"{sums.waited / 60:.1f} min", style="bold" if name == CLOCK else None
        )
    return out


PER_TRACE = {"oracle": "oracle (Selectel)", "off": "gpu-rent BILLING_HOUR=off", "clock": CLOCK,
             "rental": "gpu-rent BILLING_HOUR=rental", "SkyPilot 30": "SkyPilot autostop 30 min",
             "dstack 30": "dstack idle_duration 30m"}  # fmt: skip


def trace_table(results: dict[str, Sums], traces: list[dict]) -> Table:
    out = Table(title="per trace: Selectel GPU-hours (gpu-rent by BILLING_HOUR)")
    out.add_column("trace", no_wrap=True)
    for column in PER_TRACE:
        out.add_column(column, justify="right")
    for trace in traces:
        out.add_row(
            trace["name"], *(f"{results[name].per_trace[trace['name']] / HOUR:.0f}" for name in PER_TRACE.values())
        )
    return out


def sweep(traces: list[dict], warm_up: float, best_waits: float, oracle_hours: float) -> Table:
    """Which default would meet the goal: BILLING_HOUR clock or off, at other IDLE_MINUTES and grace."""
    graces = (45, 30, 15, 5)
    out = Table(title="what would meet the goal: Selectel x the oracle, waits x the best anchor's (green: met)")
    out.add_column("BILLING_HOUR, IDLE_MINUTES", no_wrap=True)
    for grace in graces:
        out.add_column(f"grace {grace}", justify="right", no_wrap=True)
    for mode in ("clock", "off"):
        for idle in (30, 20, 15, 10):
            cells = []
            for grace in graces:
                sums = run(traces, gpu_rent(mode, idle, grace), warm_up)
                ratio, waits = sums.billed["Selectel"] / oracle_hours, sums.waited / best_waits
                cell = f"{ratio:.3f}x, {waits:.2f}"
                cells.append(f"[green]{cell}[/]" if ratio <= GOAL and waits <= 1 else cell)
            out.add_row(f"{mode}, {idle}", *cells)
    out.caption = f"grace: IDLE_GRACE_MINUTES; the defaults: clock (the goal's), {IDLE_MINUTES}, grace {GRACE_MINUTES}"
    return out


def warm_up_seconds(given: float | None) -> tuple[float, str]:
    if given is not None:
        return given, "given with --warm-up"
    measured = left("warm_up")
    if measured and isinstance(measured.get("warm_up_seconds"), int | float):
        return float(measured["warm_up_seconds"]), "bench/warm_up.py's warm `up`, measured in this run"
    return WARM_UP_LAST, "bench/warm_up.py's last measured warm `up` (not run before this bench in this run)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm-up", type=float, metavar="SECONDS", help="the re-rent's warm-up instead")
    parser.add_argument("--write-traces", action="store_true", help="write bench/traces/ anew from the seed")
    args = parser.parse_args(argv)
    if args.write_traces:
        for path in _traces.write():
            print(f"wrote {path}")
    traces = _traces.load()
    warm_up, why = warm_up_seconds(args.warm_up)
    print(f"warm-up    {warm_up:.1f} s a re-rent: {why}", flush=True)
    results = {name: run(traces, keeper, warm_up) for name, keeper in policies().items()}
    console.print(table(results, warm_up))
    print("re-rents: rents after the week's first; waited: every rent's warm-up, the first included")
    console.print(trace_table(results, traces))
    for trace in traces:
        print(f"  {trace['name']:<10} {trace['shape']}")
    ratio, waits = goal(results, CLOCK)
    met = ratio <= GOAL and waits <= 1
    print(f"goal       {CLOCK}: {ratio:.3f}x the oracle under Selectel (goal <= {GOAL}), waits {waits:.2f}x the "
          f"best anchor's (goal <= 1): {'met' if met else 'NOT met'}", flush=True)  # fmt: skip
    if not met:
        oracle_hours = results["oracle (Selectel)"].billed["Selectel"]
        console.print(sweep(traces, warm_up, min(results[a].waited for a in ANCHORS), oracle_hours))
    for mode in ("off", "clock", "rental"):
        name = f"gpu-rent BILLING_HOUR={mode}"
        why = f"{name}: Selectel GPU-hours / the oracle's, {len(traces)} week-long traces"
        report(f"idle-tax-{mode}", goal(results, name)[0], f"<= {GOAL}", why)
    report("idle-tax-waits", waits, "<= 1", f"{CLOCK}: minutes waited for a GPU / the fewest of the anchors' timers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
