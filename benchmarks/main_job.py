"""The README's main job on the whole default matrix, measured (results go to benchmarks/main-job-results.md).

  python benchmarks/main_job.py [build] [--cold RUN_ID]   the main job twice, side by side: the first run (cold
      when the engine holds none of the cells' images; or an earlier cold run, `--cold RUN_ID`, read from
      runs/) and a second run with nothing changed (warm); build time per cell and per layer; the disk the
      engine holds afterwards, by kind
  python benchmarks/main_job.py footprint LABEL           the disk by kind now (e.g. `after-tests`)

Each call adds to benchmarks/main-job-results.json and renders the Markdown page from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildscripts.build import footprint  # noqa: E402

OUT = ROOT / "benchmarks" / "main-job-results.json"
RUNS = ROOT / "runs"


def run_build(run_id: str) -> float:
    RUNS.mkdir(exist_ok=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "buildscripts", "build", "--run-id", run_id], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.monotonic() - started
    (RUNS / f"{run_id}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"{run_id} exited {done.returncode}; log: {RUNS / (run_id + '.log')}\n{done.stderr[-2000:]}")
    return seconds


def summary(run_id: str, seconds: float | None = None) -> dict[str, Any]:
    """Wall time (measured, else from the record's start and end) and build times per cell and layer."""
    record = json.loads((RUNS / run_id / "results.json").read_text())
    if seconds is None:
        started, finished = (datetime.fromisoformat(record[k]) for k in ("started", "finished"))
        seconds = (finished - started).total_seconds()
    cells = {}
    for cell in record["cells"]:
        build = cell.get("build") or {}
        if build.get("status") != "passed":
            continue
        verify = sum(s.get("duration_s", 0.0) for s in cell.get("stages", []))
        cells[cell["cell_id"]] = {"build_s": build.get("duration_s", 0.0), "cached": build.get("cached", False),
                                  "layers_s": build.get("layers", {}), "verify_s": round(verify, 1),
                                  "verdict": cell.get("verdict"), "reused": bool(cell.get("reused_from"))}
    return {"run_id": run_id, "wall_s": round(seconds, 1), "cells": cells}


def disk(label: str) -> dict[str, Any]:
    now = footprint.measure(docker.from_env(), RUNS)
    return {"label": label, "images_gb": round(now.images / 1e9, 2), "build_cache_gb": round(now.build_cache / 1e9, 2),
            "runs_gb": round(now.runs / 1e9, 3), "free_gb": round(shutil.disk_usage(ROOT).free / 1e9, 1)}


def render(data: dict[str, Any]) -> str:
    lines = ["# The main job on the default matrix", "",
             f"Measured by `benchmarks/main_job.py` on {data.get('machine', 'this machine')}.", ""]
    runs = data.get("runs", {})
    if runs:
        cold, warm = runs.get("first"), runs.get("second")
        lines += ["| run | wall time | ratio |", "| --- | ---: | ---: |"]
        if cold:
            lines.append(f"| first (`{cold['run_id']}`) | {cold['wall_s']:.0f} s | 1 |")
        if cold and warm:
            lines.append(f"| second, nothing changed (`{warm['run_id']}`) | {warm['wall_s']:.1f} s | "
                         f"{warm['wall_s'] / cold['wall_s']:.3f}× |")
        lines += ["", "Per cell, first run (seconds; layers as BuildKit timed them, 0 = cache hit):", "",
                  "| cell | build | layers | CPU verification | verdict |", "| --- | ---: | --- | ---: | --- |"]
        for cell, info in (cold or {}).get("cells", {}).items():
            layers = ", ".join(f"{k} {v:.0f}" for k, v in info["layers_s"].items() if v)
            lines.append(f"| `{cell}` | {info['build_s']:.0f} | {layers or 'all cached'} | {info['verify_s']:.0f} | "
                         f"{info['verdict']} |")
    lines += [f"- {note}" for note in data.get("notes", [])]
    if data.get("disk"):
        lines += ["", "Disk by kind (GB):", "", "| when | images | BuildKit cache (no image holds it) | run folders | "
                  "free |", "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {d['label']} | {d['images_gb']} | {d['build_cache_gb']} | {d['runs_gb']} | {d['free_gb']} |"
                  for d in data["disk"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what")
    b = sub.add_parser("build")
    b.add_argument("--cold", metavar="RUN_ID", help="an earlier cold run under runs/ to read instead of running one")
    b.add_argument("--note", action="append", default=[], help="a line for the results page (how the runs were made)")
    f = sub.add_parser("footprint")
    f.add_argument("label")
    a = ap.parse_args(sys.argv[1:] or ["build"])   # `nox -s benchmark` runs it with no arguments
    data: dict[str, Any] = json.loads(OUT.read_text()) if OUT.is_file() else {}
    data["machine"] = f"a {os.cpu_count()}-core {platform.machine()} machine"
    if a.what == "build":
        stamp = time.strftime("%Y%m%d-%H%M%S")
        first = summary(a.cold) if a.cold else summary(f"bench-{stamp}-1", run_build(f"bench-{stamp}-1"))
        second_id = f"bench-{stamp}-2"
        data["runs"] = {"first": first, "second": summary(second_id, run_build(second_id))}
        data["disk"] = [disk("after the main job")]
        data["notes"] = a.note
    else:
        data.setdefault("disk", []).append(disk(a.label))
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(render(data))
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
