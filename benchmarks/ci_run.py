"""`.ci/run` end to end, as CI runs it: the wall time of the whole and of each step, and the free disk under /
(results go to benchmarks/ci-run-results.json and .md).

  python benchmarks/ci_run.py run LABEL [--wipe] [--note TEXT]
      `.ci/run` once, each line of its output stamped with the second it came, the free disk sampled every 10 s;
      `--wipe` empties the engine first (images, BuildKit cache, runs/), as on a fresh CI machine. The test
      session's `--junitxml` and `--durations=0` are kept, for `suite_time.py read`.
  python benchmarks/ci_run.py read LABEL LOG DISK --started EPOCH --wall SECONDS [--note TEXT]
      a run made by hand: its log (unstamped: the steps' times are then nox's own, to the minute), and a disk
      trace of `EPOCH FREE_BYTES` lines.

The steps are what `.ci/run` runs: install (the engine and tools), then nox's sessions (lint, lock, build, tests);
the BuildKit prune between the main job and the tests falls in the gap before `tests`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suite_time import commit  # this folder's: the scripts run as `python benchmarks/NAME.py`

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "ci-run-results.json"
JUNIT, LOG, DISK = Path("/tmp/ci-run-junit.xml"), Path("/tmp/ci-run.log"), Path("/tmp/ci-run-disk.txt")
RUNNING = re.compile(r"nox > Running session (?P<name>\w+)")
ENDED = re.compile(r"nox > Session (?P<name>\w+) was successful in (?P<amount>[0-9.]+) (?P<unit>seconds|minutes)")
PYTEST = re.compile(r"=+ (?P<counts>[^=]*?) in (?P<seconds>[0-9.]+)s")
SAMPLE_S = 10


def run(wipe: bool) -> tuple[float, float]:
    """.ci/run once: (its start, its wall time); the stamped log and the disk trace are left at LOG and DISK."""
    if wipe:
        for argv in (["sh", "-c", "docker ps -aq | xargs -r docker rm -f"], ["sh", "-c", "docker images -aq | "
                     "xargs -r docker rmi -f"], ["docker", "buildx", "prune", "--all", "--force"]):
            subprocess.run(argv, check=True, capture_output=True)
        shutil.rmtree(ROOT / "runs", ignore_errors=True)
    stop = threading.Event()

    def sample() -> None:
        with DISK.open("w") as out:
            while not stop.is_set():
                out.write(f"{time.time():.0f} {shutil.disk_usage('/').free}\n")
                out.flush()
                stop.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    env = {**os.environ, "PYTEST_ADDOPTS": f"--durations=0 --junitxml={JUNIT}"}
    started = time.time()
    with LOG.open("w") as out, subprocess.Popen(["bash", ".ci/run"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True, errors="replace") as ci:
        assert ci.stdout is not None
        for line in ci.stdout:
            out.write(f"{time.time():.0f}\t{line}")
    wall = time.time() - started
    stop.set()
    sampler.join()
    if ci.returncode != 0:
        print(f".ci/run exited {ci.returncode}: the times are recorded all the same (log: {LOG})")
    return started, wall


def steps(log: str, started: float, wall: float) -> list[dict[str, Any]]:
    """Each step's name, start and seconds: from the stamps where the log has them; else from nox's own times (to
    the minute), the sessions laid end to end after an install that takes the rest of the wall time."""
    found: list[dict[str, Any]] = [{"name": "install", "start": started}]
    stamped = False
    for raw in log.splitlines():
        stamp, tab, line = raw.partition("\t")
        if not tab or not stamp.isdigit():
            stamp, line = "", raw
        stamped = stamped or bool(stamp)
        if m := RUNNING.search(line):
            found.append({"name": m["name"], "start": float(stamp) if stamp else None})
        elif (m := ENDED.search(line)) and found[-1]["name"] == m["name"]:
            found[-1]["nox_s"] = float(m["amount"]) * (60 if m["unit"] == "minutes" else 1)
            found[-1]["end"] = float(stamp) if stamp else None
    if not stamped:
        found[0]["end"] = started + wall - sum(s.get("nox_s", 0) for s in found[1:])
        for one, after in itertools.pairwise(found):
            after["start"] = one["end"]
            after["end"] = after["start"] + after.get("nox_s", 0)
    for one, after in itertools.pairwise(found):
        if one.get("end") is None:
            one["end"] = after["start"]
    if found[-1].get("end") is None:
        found[-1]["end"] = started + wall
    for one in found:
        one["seconds"] = round(one["end"] - one["start"], 1)
    return found


def record(log: Path, disk: Path, started: float, wall: float, notes: list[str], tested: str) -> dict[str, Any]:
    text = log.read_text(errors="replace")
    trace = [tuple(map(float, line.split()[:2])) for line in disk.read_text().splitlines() if line.strip()]
    found = steps(text, started, wall)
    for one in found:
        inside = [free for when, free in trace if one["start"] <= when <= one["end"]]
        one["free_gb_first"] = round(inside[0] / 1e9, 1) if inside else None
        one["free_gb_lowest"] = round(min(inside) / 1e9, 1) if inside else None
    tests = PYTEST.findall(text)
    return {"wall_s": round(wall, 1), "steps": [{k: v for k, v in s.items() if k not in ("start", "end")}
                                                for s in found],
            "tests": {"summary": tests[-1][0].strip(), "pytest_s": float(tests[-1][1])} if tests else None,
            "free_gb_lowest": round(min(free for _, free in trace) / 1e9, 1) if trace else None,
            "notes": notes, "commit": tested, "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def render(data: dict[str, Any]) -> str:
    lines = ["# `.ci/run` end to end", "",
             f"Measured by `benchmarks/ci_run.py` on {data['machine']}: the whole of `.ci/run` (install, lint, lock "
             "check, the main job, the BuildKit prune, the test suite), as CI runs it, with the free disk under / "
             "sampled every 10 s.", ""]
    for label, r in data["runs"].items():
        tests = r["tests"] or {}
        lines += [f"## `{label}` ({r['when']}, commit {r['commit']})", "",
                  f"**{r['wall_s']:.0f} s wall** ({r['wall_s'] / 60:.1f} min); tests: {tests.get('summary', '–')} in "
                  f"{tests.get('pytest_s', '–')} s (pytest's own time); "
                  f"lowest free disk {r['free_gb_lowest']} GB. {' '.join(r['notes'])}", "",
                  "| step | seconds | free disk at its start (GB) | lowest free disk in it (GB) |",
                  "| --- | ---: | ---: | ---: |"]
        lines += [f"| {s['name']} | {s['seconds']:.0f} | {_gb(s['free_gb_first'])} | {_gb(s['free_gb_lowest'])} |"
                  for s in r["steps"]]
        lines.append("")
    return "\n".join(lines)


def _gb(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("how", choices=["run", "read"])
    ap.add_argument("label")
    ap.add_argument("files", nargs="*", help="read: LOG DISK")
    ap.add_argument("--wipe", action="store_true", help="run: empty the engine first, as on a fresh CI machine")
    ap.add_argument("--started", type=float, help="read: when the run began (seconds since the epoch)")
    ap.add_argument("--wall", type=float, help="read: the run's wall time")
    ap.add_argument("--commit", help="read: the commit the run tested (default: HEAD)")
    ap.add_argument("--note", action="append", default=[], help="a line for this run on the page")
    a = ap.parse_args()
    if a.how == "read":
        if len(a.files) != 2 or a.started is None or a.wall is None:
            sys.exit("read takes LOG DISK --started EPOCH --wall SECONDS")
        log, disk, started, wall = Path(a.files[0]), Path(a.files[1]), a.started, a.wall
    else:
        (started, wall), log, disk = run(a.wipe), LOG, DISK
    data = json.loads(OUT.read_text()) if OUT.exists() else {"runs": {}}
    data["machine"] = f"a {os.cpu_count()}-core {platform.machine()} machine"
    try:
        data["runs"][a.label] = record(log, disk, started, wall, a.note, a.commit or commit())
    except (OSError, ValueError) as exc:   # a log or disk trace missing, unreadable or not `EPOCH FREE_BYTES` lines
        sys.exit(f"cannot read the run from {log} and {disk}: {exc}")
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(render(data))
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
