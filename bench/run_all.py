"""Every bench, one after another, then one table of their ratios against their goals (make bench).

Usage (as root, from the repository root, the test ground running):
    .venv/bin/python bench/run_all.py [NAME ...]     # all of bench/*.py, or only these (e.g. tunnel status)

Runs each bench/*.py (not _*.py) with this Python, streams its output, and collects its `::gpu-rent-bench`
lines (bench/_report.py). Benchmarks inform, they are not tests: a missed goal still exits 0; a bench that
crashed (exited non-zero, or said no ratio) exits 1. A figure one bench leaves for another (bench/_report.py
leave/left: warm_up's seconds, which idle_tax bills at each re-rent) goes through a folder of this run's own;
the benches that read one run last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import FIGURES, met, parse

BENCH = Path(__file__).resolve().parent
READERS = ("idle_tax",)  # read what other benches leave in this run (warm_up's seconds): they run after them
console = Console(width=None if sys.stdout.isatty() else 120)  # a log (make bench | tee) keeps rows on one line


def benches(names: list[str]) -> list[Path]:
    found = sorted(
        (p for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name != Path(__file__).name),
        key=lambda p: (p.stem in READERS, p.name),
    )
    if not names:
        return found
    unknown = set(names) - {p.stem for p in found}
    if unknown:
        sys.exit(f"no such bench: {', '.join(sorted(unknown))} (there are: {', '.join(p.stem for p in found)})")
    return [p for p in found if p.stem in names]


def run(script: Path, figures: str) -> tuple[int, list[dict], float]:
    """(exit code, its result lines, seconds); its output streamed as it comes."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-u", str(script)], cwd=BENCH.parent, env=os.environ | {FIGURES: figures},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
    )  # fmt: skip
    results = []
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            result = parse(line.rstrip("\n"))
            if result is not None:
                results.append(result)
    except KeyboardInterrupt:  # the bench got the Ctrl+C too: let it clean up (destroy what it rented)
        proc.wait()
        raise
    return proc.wait(), results, time.monotonic() - started


def table(rows: list[tuple[str, int, list[dict], float]]) -> Table:
    out = Table(title="gpu-rent benchmarks (ratios against their goals)")
    for column in ("bench", "metric", "ratio", "goal", "met", "reference"):
        out.add_column(column, justify="right" if column == "ratio" else "left", no_wrap=column != "reference")
    for name, code, results, seconds in rows:
        for r in results:
            ok = met(r["ratio"], r["goal"])
            out.add_row(name, r["name"], f"{r['ratio']:.3g}", r["goal"], "[green]yes[/]" if ok else "[red]no[/]",
                        r["reference"])  # fmt: skip
        if code != 0 or not results:
            why = f"exit {code}" if code != 0 else "no ratio printed"
            out.add_row(name, "-", "-", "-", f"[bold red]crashed[/] ({why}, {seconds:.0f} s)", "its output above")
    return out


def main() -> int:
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-rent-bench-") as figures:
            for script in benches(sys.argv[1:]):
                console.rule(f"bench/{script.name}")
                rows.append((script.stem, *run(script, figures)))
    except KeyboardInterrupt:
        console.print("[bold]interrupted[/]: the table has the benches that finished")
        console.print(table(rows))
        return 130
    console.rule()
    console.print(table(rows))
    console.print(
        "Wall-clock ratios from one run on this machine, with whatever else runs on it: noisy, more so on few cores."
    )
    crashed = [name for name, code, results, _ in rows if code != 0 or not results]
    if crashed:
        console.print(f"[bold red]crashed[/]: {', '.join(crashed)}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
