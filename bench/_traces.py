"""Week-long usage traces of a GPU renter, seeded, for bench/idle_tax.py: when the user's work keeps a GPU busy.

Usage (from the repository root):
    .venv/bin/python bench/_traces.py     # (re)writes bench/traces/*.json; the same seed writes the same files

A trace is one JSON file: its name, shape, seed, the week's start (unix time, Monday 00:00 Moscow time, whose
clock hours are UTC's: Selectel bills by them) and `work`, the (start, end) intervals in seconds from that start
when a generation, a training step or a batch runs. What lies between them is the user away, thinking, or
looking at results: no work a killer could see. Where each shape comes from:

- evening: an evening of generation bursts with 2-40 minute gaps. The product's own case (SPEC §1: "a big GPU
  for image generation with SwarmUI, for an evening"); the gap range is issue 40's. That interactive GPU use is
  bursty, long sessions with sporadic GPU work and long gaps between tasks, is what NotebookOS measured on
  production notebook workloads (arXiv 2503.20591, §1). Burst lengths (a batch of images, 1-6 min) and the
  number of bursts are assumptions.
- training: a long run (a LoRA or fine-tune, 3-9 h) between a few test generations. SkyPilot's users name the
  long job that keeps a cluster busy (issue #1306, shared/research/idle-lessons.md §2.3); the lengths are
  assumptions.
- checks: a user who queues a batch and comes back every 50 minutes to look and queue the next: issue 40's
  shape, the one a 30-minute timer handles worst (each gap a little longer than it). Batch length and the
  session's hours are assumptions.
- lunch: a working day of bursts with short gaps and a lunch break of 45-75 min: an assumption, the common
  day of someone who generates at work.
- night: a batch queued late in the evening that runs 2-6 h, then nothing until the next evening (a queue of
  upscales or a data set made overnight): an assumption.
- forgotten: `up`, one image, the laptop closed (SPEC §1: "a sleeping laptop never leaves a GPU billing";
  the rentals left billing in SkyPilot #67 and #4170, idle-lessons §2.3). How often it happens is an assumption.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

TRACES = Path(__file__).resolve().parent / "traces"
SEED = 40  # issue 40
DAY, MINUTE = 86400, 60
WEEK_START = int(datetime(2026, 3, 1, 21, tzinfo=UTC).timestamp())  # Monday 2 March 2026, 00:00 Moscow time


def _bursts(rng: random.Random, start: float, count: int, length: tuple, gap: tuple) -> list[list[int]]:
    """count bursts from start, each length minutes long (uniform), gap minutes apart (uniform)."""
    work, at = [], start
    for _ in range(count):
        end = at + rng.uniform(*length) * MINUTE
        work.append([round(at), round(end)])
        at = end + rng.uniform(*gap) * MINUTE
    return work


def _days(rng: random.Random, count: int, weekdays: bool = False) -> list[int]:
    return sorted(rng.sample(range(5) if weekdays else range(7), count))


def evening(rng: random.Random) -> list[list[int]]:
    work = []
    for day in _days(rng, 5):
        start = day * DAY + rng.uniform(19, 21.5) * 3600
        work += _bursts(rng, start, rng.randint(8, 20), (1, 6), (2, 40))
    return work


def training(rng: random.Random) -> list[list[int]]:
    work = []
    for day in _days(rng, 2):
        tests = _bursts(rng, day * DAY + rng.uniform(10, 14) * 3600, rng.randint(2, 5), (1, 4), (2, 10))
        run_start = tests[-1][1] + rng.uniform(3, 10) * MINUTE
        run = [round(run_start), round(run_start + rng.uniform(3, 9) * 3600)]
        after = _bursts(rng, run[1] + rng.uniform(10, 60) * MINUTE, rng.randint(2, 4), (1, 4), (2, 10))
        work += [*tests, run, *after]
    return work


def checks(rng: random.Random) -> list[list[int]]:
    work = []
    for day in _days(rng, 4):
        at = day * DAY + rng.uniform(10, 12) * 3600
        session_end = at + rng.uniform(4, 8) * 3600
        while at < session_end:
            work.append([round(at), round(at + rng.uniform(3, 8) * MINUTE)])
            at += rng.uniform(45, 55) * MINUTE
    return work


def lunch(rng: random.Random) -> list[list[int]]:
    work = []
    for day in range(5):
        morning = day * DAY + rng.uniform(9, 10) * 3600
        lunch_at = day * DAY + rng.uniform(12.75, 13.5) * 3600
        afternoon = lunch_at + rng.uniform(45, 75) * MINUTE
        home_at = day * DAY + rng.uniform(17.5, 18.5) * 3600
        for start, until in ((morning, lunch_at), (afternoon, home_at)):
            bursts = _bursts(rng, start, 200, (2, 10), (2, 15))
            work += [b for b in bursts if b[1] <= until]
    return work


def night(rng: random.Random) -> list[list[int]]:
    work = []
    for day in _days(rng, 4):
        setup = _bursts(rng, day * DAY + rng.uniform(22.5, 23.5) * 3600, rng.randint(1, 3), (1, 3), (2, 6))
        batch_start = setup[-1][1] + rng.uniform(1, 3) * MINUTE
        work += [*setup, [round(batch_start), round(batch_start + rng.uniform(2, 6) * 3600)]]
    return work


def forgotten(rng: random.Random) -> list[list[int]]:
    work = []
    for day in _days(rng, 4):
        at = day * DAY + rng.uniform(9, 23) * 3600
        work.append([round(at), round(at + rng.uniform(20, 60))])
    return work


SHAPES = {
    "evening": (evening, "5 evenings of 8-20 generation bursts of 1-6 min, 2-40 min apart"),
    "training": (training, "2 training runs of 3-9 h, a few test generations before and after"),
    "checks": (checks, "4 days of a 3-8 min batch queued every 45-55 min for 4-8 h"),
    "lunch": (lunch, "5 working days of 2-10 min bursts 2-15 min apart, a lunch break of 45-75 min"),
    "night": (night, "4 nights of a few minutes' set-up, then a batch of 2-6 h"),
    "forgotten": (forgotten, "4 rentals a week that make one image (20-60 s) and are forgotten"),
}


def generate(seed: int = SEED) -> dict[str, dict]:
    """Every shape's trace, each from its own generator seeded with seed and its name."""
    traces = {}
    for name, (shape, about) in SHAPES.items():
        work = shape(random.Random(f"{seed}-{name}"))
        ends = [0, *(end for _, end in work)]
        assert all(before <= start < end for before, (start, end) in zip(ends, work, strict=False)), name
        traces[name] = {"name": name, "shape": about, "seed": seed, "week_start": WEEK_START, "work": work}
    return traces


def write(folder: Path = TRACES, seed: int = SEED) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, trace in generate(seed).items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(trace, separators=(",", ":")) + "\n")
        written.append(path)
    return written


def load(folder: Path = TRACES) -> list[dict]:
    """The traces in git, in SHAPES' order."""
    return [json.loads((folder / f"{name}.json").read_text()) for name in SHAPES]


if __name__ == "__main__":
    for path in write():
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    sys.exit(0)
