"""The linux/arm64 cell on an x86_64 machine: cold build and CPU ladder under QEMU emulation, beside the amd64
cell of the same SGLang.

    python benchmarks/arm64.py [--build] [--runs DIR] --arm64 RESULTS.json --amd64 RESULTS.json
                               [--before RESULTS.json] [--base-seconds N] [--out benchmarks/arm64-results.md]

--build first runs `python -m buildscripts build --only ARM64_CELL` (wall clock measured; cold when nothing
of it is cached) into --runs, and reads its results. Each RESULTS.json is a run's results file holding the
cell: its build time per Dockerfile stage, each ladder stage's time and where it ran, and the image's size.
--base-seconds: the debootstrap of the arm64 base, measured apart (the build log says it). --before: an earlier
run's results of the arm64 cell (another image of it, e.g. without bytecode): its ladder beside this one's, stage by
stage, with each import's seconds. Writes Markdown.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARM64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"
AMD64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm"


def cell_of(path: Path, cell_id: str) -> dict[str, Any]:
    run = json.loads(path.read_text())
    found = next((c for c in run["cells"] if c["cell_id"] == cell_id), None)
    if found is None:
        sys.exit(f"{path} holds no cell {cell_id}")
    return dict(found)


def by_name(cell: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A cell's stages by name."""
    return {s["name"]: s for s in cell.get("stages", [])}


def stage_rows(arm: dict[str, Any], amd: dict[str, Any]) -> list[str]:
    a, b = by_name(arm), by_name(amd)
    rows = ["| stage | arm64 (s) | arm64: where / status | amd64 (s) | amd64: status |", "|---|---:|---|---:|---|"]
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name, {}), b.get(name, {})
        rows.append(f"| {name} | {x.get('duration_s', '')} | {x.get('where', '')} / {x.get('status', '')} "
                    f"| {y.get('duration_s', '')} | {y.get('status', '')} |")
    return rows


def layer_rows(arm: dict[str, Any], amd: dict[str, Any]) -> list[str]:
    a, b = (c.get("build", {}).get("layers", {}) for c in (arm, amd))
    rows = ["| Dockerfile stage | arm64 build (s) | amd64 build (s) |", "|---|---:|---:|"]
    rows += [f"| {n} | {a.get(n, '')} | {b.get(n, '')} |" for n in dict.fromkeys([*a, *b])]
    return rows


def before_rows(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The arm64 ladder of two runs side by side; the import stage also module by module."""
    a, b = by_name(before), by_name(after)
    rows = ["| stage | before (s) | status | after (s) | status |", "|---|---:|---|---:|---|"]
    for name in dict.fromkeys([*a, *b]):
        x, y = a.get(name, {}), b.get(name, {})
        rows.append(f"| {name} | {x.get('duration_s', '')} | {x.get('status', '')} "
                    f"| {y.get('duration_s', '')} | {y.get('status', '')} |")
    seconds = [s.get("evidence", {}).get("seconds", {}) for s in (a.get("import", {}), b.get("import", {}))]
    rows += [f"| import {m} | {seconds[0].get(m, '')} | | {seconds[1].get(m, '')} | |"
             for m in dict.fromkeys([*seconds[0], *seconds[1]])]
    return rows


def gib(n: int | None) -> str:
    return f"{(n or 0) / 2**30:.2f} GiB"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs")
    ap.add_argument("--arm64", type=Path)
    ap.add_argument("--amd64", type=Path, required=True)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--base-seconds", type=float)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "arm64-results.md")
    a = ap.parse_args(argv)
    wall = None
    if a.build:
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "buildscripts", "build", "--only", ARM64, "--runs", str(a.runs),
                        "--run-id", "bench-arm64"], cwd=ROOT, check=False)
        wall = round(time.monotonic() - started, 1)
        a.arm64 = a.runs / "bench-arm64" / "results.json"
    if a.arm64 is None:
        sys.exit("give --arm64 RESULTS.json, or --build")
    arm, amd = cell_of(a.arm64, ARM64), cell_of(a.amd64, AMD64)
    ladder = {c["cell_id"]: round(sum(s.get("duration_s", 0) for s in c.get("stages", [])), 1) for c in (arm, amd)}
    lines = [f"# {ARM64} beside {AMD64}", "",
             f"- arm64 build: {arm['build'].get('duration_s')} s (`buildx` wall clock)"
             + (f"; the whole `build` command {wall} s" if wall else "")
             + (f"; the arm64 base's debootstrap {a.base_seconds} s" if a.base_seconds else ""),
             f"- amd64 build: {amd['build'].get('duration_s')} s",
             f"- CPU ladder: arm64 {ladder[ARM64]} s (under emulation), amd64 {ladder[AMD64]} s",
             f"- image size: arm64 {gib(arm['image'].get('size_bytes'))}, amd64 {gib(amd['image'].get('size_bytes'))}",
             "", *layer_rows(arm, amd), "", *stage_rows(arm, amd), ""]
    if a.before is not None:
        earlier = cell_of(a.before, ARM64)
        lines += [f"## arm64 ladder: {a.before} before, {a.arm64} after", "",
                  f"- image size: before {gib(earlier['image'].get('size_bytes'))}, "
                  f"after {gib(arm['image'].get('size_bytes'))}", "", *before_rows(earlier, arm), ""]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
