"""Where `nox -s tests` spends its time, per tier, file and test (results go to benchmarks/suite-runs.json and .md;
what was read from them is benchmarks/suite-results.md).

  python benchmarks/suite_time.py run LABEL [--note TEXT] [-- PYTEST_ARGS]
      `nox -s tests` once, after the main job as CI runs it (.ci/run), with --junitxml and --durations=0; the
      machine's busy CPU-seconds over the run and its free disk (run it with nothing else running)
  python benchmarks/suite_time.py read LABEL JUNIT LOG [--wall SECONDS] [--note TEXT]
      a run made by hand (`nox -s tests -- --durations=0 --junitxml=JUNIT > LOG`), read back

Each call adds or replaces the run named LABEL (`before`, `after`) and renders the page from all of them: the wall
time, then the seconds per tier and per file (the time of each test's setup, call and teardown, summed: with
parallel workers the sum is worker time and exceeds the wall) and the slowest steps (a session fixture's cost lands
in the setup of the first test that asks for it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "suite-runs.json"
SUMMARY = re.compile(r"^=+ (?P<counts>[^=]*?) in (?P<seconds>[0-9.]+)s", re.MULTILINE)
DURATION = re.compile(r"^(?P<secs>[0-9.]+)s (?P<when>setup|call|teardown) +(?P<test>\S.*)$", re.MULTILINE)
TOP = 25


def tier_of(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def file_of(classname: str) -> str:
    """tests.e2e.test_x (or tests.e2e.test_x.TestClass) -> tests/e2e/test_x.py"""
    parts = classname.split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()
    return "/".join(parts) + ".py" if parts else classname


def read(junit: Path, log: Path, wall: float | None) -> dict[str, Any]:
    files: dict[str, float] = defaultdict(float)
    tests = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        files[file_of(case.get("classname", ""))] += float(case.get("time", 0))
        tests += 1
    text = log.read_text(errors="replace")
    tiers: dict[str, float] = defaultdict(float)
    for path, seconds in files.items():
        tiers[tier_of(path)] += seconds
    steps = sorted(((float(m["secs"]), m["when"], m["test"].strip()) for m in DURATION.finditer(text)), reverse=True)
    summary = SUMMARY.findall(text)
    counts, pytest_s = summary[-1] if summary else ("", "nan")
    return {"wall_s": round(wall if wall is not None else float(pytest_s), 1), "pytest_s": round(float(pytest_s), 1),
            "summary": counts.strip(), "tests": tests,
            "tiers": {k: round(v, 1) for k, v in sorted(tiers.items())},
            "files": {k: round(v, 1) for k, v in sorted(files.items(), key=lambda kv: -kv[1])},
            "slowest": [{"seconds": s, "when": w, "test": t} for s, w, t in steps[:TOP]]}


def _cpu_ticks() -> list[int]:
    """/proc/stat's first line: user, nice, system, idle, iowait, irq, softirq, steal (in clock ticks)."""
    return [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy since boot (user, nice, system, irq, softirq)."""
    user, nice, system, _idle, _iowait, irq, softirq, _steal = _cpu_ticks()
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """CPU-seconds the hypervisor gave to others while this machine wanted them, since boot."""
    return _cpu_ticks()[7] / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def machine_watched() -> Iterator[dict[str, float]]:
    """While the block runs: the machine's busy CPU-seconds, those its hypervisor gave to others (steal: on a
    shared host the same work takes longer), and the free disk on / at the start and at its lowest (sampled
    every 10 s); filled in when the block ends."""
    found: dict[str, float] = {}
    stop, lowest = threading.Event(), [shutil.disk_usage("/").free]
    found["free_start_gb"] = round(lowest[0] / 1e9, 1)

    def sample() -> None:
        while not stop.wait(10):
            lowest[0] = min(lowest[0], shutil.disk_usage("/").free)

    sampler = threading.Thread(target=sample, daemon=True)
    before, stolen = busy_seconds(), steal_seconds()
    sampler.start()
    try:
        yield found
    finally:
        stop.set()
        sampler.join()
        found["cpu_s"] = round(busy_seconds() - before)
        found["steal_s"] = round(steal_seconds() - stolen)
        found["free_lowest_gb"] = round(lowest[0] / 1e9, 1)


def run(pytest_args: list[str]) -> tuple[Path, Path, float, dict[str, float]]:
    junit, log = Path("/tmp/suite-time-junit.xml"), Path("/tmp/suite-time.log")
    started = time.monotonic()
    with log.open("w") as out, machine_watched() as machine:
        done = subprocess.run(["nox", "-s", "tests", "--", "--durations=0", f"--junitxml={junit}", *pytest_args],
                              cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(f"`nox -s tests` exited {done.returncode}: the times are recorded all the same (log: {log})")
    return junit, log, wall, machine


def render(data: dict[str, Any]) -> str:
    labels = list(data["runs"])
    runs = [data["runs"][label] for label in labels]
    head = "| | " + " | ".join(f"`{label}`" for label in labels) + " |"
    rule = "| --- |" + " ---: |" * len(labels)
    lines = ["# Where `nox -s tests` spends its time", "",
             f"Measured by `benchmarks/suite_time.py` on {data['machine']}, after the main job (`nox -s build`) "
             "had built the default matrix, as `.ci/run` runs them.", ""]
    for label, r in zip(labels, runs, strict=True):
        machine = (f", {r['cpu_s']} CPU-seconds of the machine ({r['steal_s']} more stolen by its host), free disk "
                   f"{r['free_start_gb']} GB at the start and {r['free_lowest_gb']} GB at the lowest"
                   if "cpu_s" in r else "")
        lines.append(f"- `{label}` ({r['when']}, commit {r['commit']}): {r['summary']}; "
                     f"**{r['wall_s']:.0f} s wall** ({r['wall_s'] / 60:.1f} min){machine}. "
                     f"{' '.join(r.get('notes', []))}")
    lines += ["", "Seconds per tier (each test's setup, call and teardown summed: with workers in parallel the sum "
              "exceeds the wall time):", "", head, rule]
    for tier in sorted({t for r in runs for t in r["tiers"]}):
        lines.append(f"| `{tier}` | " + " | ".join(_s(r["tiers"].get(tier)) for r in runs) + " |")
    lines.append("| wall | " + " | ".join(_s(r["wall_s"]) for r in runs) + " |")
    lines += ["", "Seconds per file, the costliest first (those over 10 s in any run):", "", head, rule]
    order = sorted({f for r in runs for f in r["files"]}, key=lambda f: -max(r["files"].get(f, 0) for r in runs))
    for name in order:
        if max(r["files"].get(name, 0) for r in runs) >= 10:
            lines.append(f"| `{name}` | " + " | ".join(_s(r["files"].get(name)) for r in runs) + " |")
    for label, r in zip(labels, runs, strict=True):
        lines += ["", f"Slowest steps of `{label}` (`--durations`):", "", "| seconds | step | test |",
                  "| ---: | --- | --- |"]
        lines += [f"| {s['seconds']:.1f} | {s['when']} | `{s['test']}` |" for s in r["slowest"]]
    notes = data.get("notes", [])
    return "\n".join(lines + (["", *(f"- {n}" for n in notes)] if notes else [])) + "\n"


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return head.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("how", choices=["run", "read"])
    ap.add_argument("label")
    ap.add_argument("files", nargs="*", help="read: JUNIT LOG; run: arguments for pytest (after --)")
    ap.add_argument("--wall", type=float, help="read: the run's wall time, when the log's pytest time is not it")
    ap.add_argument("--commit", help="read: the commit the run tested (default: HEAD)")
    ap.add_argument("--note", action="append", default=[], help="a line for this run on the page")
    a = ap.parse_args()
    if a.how == "read":
        if len(a.files) != 2:
            sys.exit("read takes JUNIT LOG")
        junit, log, wall = Path(a.files[0]), Path(a.files[1]), a.wall
        machine: dict[str, float] = {}
    else:
        junit, log, wall, machine = run(a.files)
    data = json.loads(OUT.read_text()) if OUT.exists() else {"runs": {}}
    data["machine"] = f"a {os.cpu_count()}-core {platform.machine()} machine"
    data["runs"][a.label] = {**read(junit, log, wall), **machine, "notes": a.note, "commit": a.commit or commit(),
                             "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(render(data))
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
