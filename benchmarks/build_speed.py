"""Build speed, measured side by side in one run (results go to benchmarks/build-results.md).

  1. cold build of one cell (no images, empty BuildKit cache),
  2. cold build of the whole default matrix (the cell above's layers pruned again first),
  3. a second build of the whole matrix with nothing changed,
  4. the floor: the sum of the unique layer build times seen in (2).

Usage: python benchmarks/build_speed.py [--cell ID] [--out benchmarks/build-results.md]
Deletes this project's images and the BuildKit cache: run it on a machine you can spare.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def wipe() -> None:
    """Remove every image this project built (not the base) and the BuildKit cache."""
    refs = sh("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "sglang-images").split()
    if refs:
        subprocess.run(["docker", "rmi", "-f", *refs], check=False, capture_output=True)
    subprocess.run(["docker", "builder", "prune", "-af"], check=True, capture_output=True)


def build(run_id: str, *only: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "buildscripts", "build", "--no-verify", "--run-id", run_id,
            "--runs", str(ROOT / "runs")]
    for pattern in only:
        argv += ["--only", pattern]
    started = time.monotonic()
    subprocess.run(argv, check=True, cwd=ROOT)
    seconds = time.monotonic() - started
    results = json.loads((ROOT / "runs" / run_id / "results.json").read_text())
    return seconds, results


def unique_layer_floor(results: dict[str, Any]) -> float:
    """Sum of layer times, each distinct stage-of-a-layer counted once (what sharing makes possible)."""
    seen: dict[tuple[str, str], float] = {}
    for cell in results["cells"]:
        build_result = cell.get("build") or {}
        axes = cell["axes"]
        for stage, secs in (build_result.get("layers") or {}).items():
            key = {"torch": axes["lane"], "sglang": axes["sglang"] + axes["lane"]}.get(stage, cell["cell_id"])
            if stage in ("base", "pyenv"):
                key = axes["base"]
            seen[(stage, key)] = max(seen.get((stage, key), 0.0), float(secs))
    return sum(seen.values())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cell", default=DEFAULT_CELL)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "build-results.md")
    a = ap.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    wipe()
    one_cold, _ = build(f"bench-{stamp}-one", a.cell)
    wipe()
    all_cold, cold_results = build(f"bench-{stamp}-all")
    all_warm, _ = build(f"bench-{stamp}-again")
    floor = unique_layer_floor(cold_results)
    cells = len([c for c in cold_results["cells"] if c.get("build", {}) and c["build"]["status"] == "passed"])
    rows = [
        ("one cell, cold", one_cold, one_cold / all_cold),
        (f"default matrix ({cells} cells), cold", all_cold, 1.0),
        ("default matrix again, nothing changed", all_warm, all_warm / all_cold),
        ("floor: sum of unique layer times", floor, floor / all_cold),
    ]
    lines = [
        "# Build speed", "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.processor() or platform.machine()}, "
        f"{sh('nproc').strip()} cores), `python benchmarks/build_speed.py`. Builds only (`--no-verify`).", "",
        "| what | seconds | ratio to cold matrix |", "| --- | ---: | ---: |",
        *(f"| {name} | {secs:.1f} | {ratio:.3f} |" for name, secs, ratio in rows), "",
        f"Cold matrix / floor = {all_cold / floor:.2f} (the rest is image export and per-cell overhead); "
        f"{cells} cells cost {all_cold / one_cold:.2f}× one cell.",
    ]
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
