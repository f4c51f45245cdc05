"""`nox -s fast` timed as a contributor runs it (results go to benchmarks/fast-results.json and .md).

  python benchmarks/fast_tests.py [--runs N] [--tiers] [--note TEXT]

Each run is the whole session (`nox -s fast`, nox's start included, its environment made once before the first
run and not timed): its wall time, pytest's own time and summary (passed, skipped, the coverage total), and the
machine's load average (1 minute) just before and just after, with its cores. The page quotes the median of the
runs and every run beside it, so that a busy machine shows as busy. `--tiers` adds one run of each tier alone
(`nox -s fast -- tests/unit`, `-- tests/process`). Each call replaces the results with its own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "fast-results.json"
SUMMARY = re.compile(r"=+ (?P<counts>[^=]*?) in (?P<seconds>[0-9.]+)s")
COVERAGE = re.compile(r"^TOTAL\s.*?(?P<percent>[0-9]+)%\s*$", re.MULTILINE)


def nox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nox", "-s", "fast", *args], cwd=ROOT, capture_output=True, text=True)


def timed(label: str, *args: str) -> dict[str, Any]:
    """One `nox -s fast ARGS`: wall time, pytest's summary, the load around it."""
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    done = nox(*(["--", *args] if args else []))
    wall = time.monotonic() - started
    output = done.stdout + done.stderr
    if done.returncode != 0:
        sys.exit(f"`nox -s fast {' '.join(args)}` exited {done.returncode}:\n{output[-3000:]}")
    summary = SUMMARY.findall(output)
    coverage = COVERAGE.search(output)
    counts, pytest_s = summary[-1] if summary else ("", "nan")
    return {"label": label, "wall_s": round(wall, 1), "pytest_s": round(float(pytest_s), 1), "summary": counts.strip(),
            "coverage": f"{coverage['percent']} %" if coverage else None,
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "buildscripts", "tests"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + (" with uncommitted changes to buildscripts/ or tests/" if dirty else "")


def render(data: dict[str, Any]) -> str:
    runs = data["runs"]
    median = statistics.median(r["wall_s"] for r in runs)
    lines = ["# `nox -s fast`, timed", "",
             f"Measured by `benchmarks/fast_tests.py` on {data['machine']}, {data['when']} (commit {data['commit']}).",
             "Wall time is the whole session, nox's start included; the load average (1 minute) is read just before "
             "and just after each run: above the core count, other work shared the machine.", "",
             f"**Median of {len(runs)} runs: {median:.0f} s.**", "",
             "| run | wall time | pytest | tests | coverage | load before → after |",
             "| --- | ---: | ---: | --- | ---: | ---: |"]
    for run in [*runs, *data.get("tiers", [])]:
        lines.append(f"| {run['label']} | {run['wall_s']:.0f} s | {run['pytest_s']:.0f} s | {run['summary']} | "
                     f"{run['coverage'] or '–'} | {run['load_before']} → {run['load_after']} |")
    notes = data.get("notes", [])
    lines += ["", *(f"- {note}" for note in notes)] if notes else []
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs of the whole session (default 3)")
    ap.add_argument("--tiers", action="store_true", help="also one run of each tier alone")
    ap.add_argument("--note", action="append", default=[], help="a line for the results page (how it was run)")
    a = ap.parse_args()
    prepared = nox("--install-only")  # the environment, made or brought up to date once, untimed
    if prepared.returncode != 0:
        sys.exit(f"`nox -s fast --install-only` exited {prepared.returncode}:\n{prepared.stderr[-3000:]}")
    data: dict[str, Any] = {
        "machine": f"a {os.cpu_count()}-core {platform.machine()} machine",
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit(), "notes": a.note,
        "runs": [timed(f"`nox -s fast`, run {i + 1}") for i in range(a.runs)],
    }
    if a.tiers:
        data["tiers"] = [timed(f"`nox -s fast -- {tier}` alone", tier) for tier in ("tests/unit", "tests/process")]
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(render(data))
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
