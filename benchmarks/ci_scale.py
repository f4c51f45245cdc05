"""CI at scale, measured side by side in one run (results go to benchmarks/ci-results.md).

Every build runs on a throw-away second engine (Docker 26, containerd image store; tests/second_engine.py),
so "a fresh runner" is that engine wiped (no image, no build cache) and this machine's own engine and
cache are never touched. A loopback registry holds the shared build cache.

  1. second runner, no cache: the selected cells built cold (the base debootstrapped too);
  2. first runner, exporting the cache: the same, cold, with `--cache-ref` (what export costs);
  3. second runner, with the cache: wiped, then built importing it (the base pulled from it);
  4. verification of those cells, then a no-op rerun *with* verification (results reused);
  5. naive baseline: each cell built alone from an empty cache, as a per-cell Dockerfile would;
  6. floor, outside Docker: every unique wheel of the cells' locks fetched and installed once (uv, empty
     cache), which is what any build of these cells must at least do.

Usage: python benchmarks/ci_scale.py [--only GLOB ...] [--skip SCENARIO ...] [--out benchmarks/ci-results.md]
(scenarios: cold, naive: the two that rebuild everything without a cache, for a shorter run)
Needs root, the engine-26 binaries (`.ci/install-engine`), docker-registry and ~40 GB free. Build logs stay
under runs/ci-scale-TIME/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildscripts import matrix  # noqa: E402
from buildscripts.lock import paths_for  # noqa: E402
from tests.registry_server import RegistryServer  # noqa: E402
from tests.second_engine import SecondEngine, second_engine  # noqa: E402


def build(engine: SecondEngine, runs: Path, run_id: str, only: list[str], *extra: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "buildscripts", "build", "--runs", str(runs), "--run-id", run_id, *extra]
    for pattern in only:
        argv += ["--only", pattern]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=engine.env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    (runs / f"{run_id}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"{run_id} failed (exit {done.returncode}); log: {runs / (run_id + '.log')}\n{done.stderr[-2000:]}")
    return seconds, json.loads((runs / run_id / "results.json").read_text())


def rebuilt_layers(results: dict[str, Any]) -> dict[str, list[str]]:
    """Per cell, the Dockerfile stages that were really built (more than 0 s), from the build logs."""
    return {c["cell_id"]: sorted(k for k, v in (c.get("build") or {}).get("layers", {}).items() if v > 0)
            for c in results["cells"] if (c.get("build") or {}).get("status") == "passed"}


def unique_blocks(lock: Path, seen: set[str]) -> list[str]:
    """The requirement blocks (`name==version \\ --hash ...`) of `lock` not installed before."""
    text = "\n".join(line for line in lock.read_text().splitlines() if not line.lstrip().startswith("#"))
    blocks = [b.strip() for b in re.split(r"\n(?=\S)", text) if b.strip()]
    fresh = [b for b in blocks if b not in seen]
    seen.update(fresh)
    return fresh


def floor(cells: list[matrix.Cell], locks: Path) -> tuple[float, int]:
    """Fetch and install every unique wheel of the cells' locks once, outside Docker, from an empty cache."""
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
        env = {**os.environ, "UV_CACHE_DIR": f"{tmp}/cache", "UV_LINK_MODE": "copy"}
        started = time.monotonic()
        for index, cell in enumerate(cells):
            chain = paths_for(cell, locks)
            for n, lock in enumerate(p for p in (chain.lane, chain.sglang, chain.toolkit) if p is not None):
                fresh = unique_blocks(lock, seen)
                if not fresh:
                    continue
                req = Path(tmp) / f"req-{index}-{n}.txt"
                req.write_text("\n".join(fresh) + "\n")
                subprocess.run(["uv", "pip", "install", "--no-deps", "--require-hashes", "--no-build", "--python",
                                sys.executable, "--target", f"{tmp}/site-{index}-{n}", "-r", str(req)],
                               env=env, check=True, capture_output=True)
        return time.monotonic() - started, len(seen)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", default=[], metavar="GLOB")
    ap.add_argument("--skip", action="append", default=[], choices=["cold", "naive"],
                    help="leave out a scenario that rebuilds everything without a cache")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "ci-results.md")
    a = ap.parse_args()
    default = matrix.load(ROOT / "matrix.yaml")
    cells = [c for c in matrix.select(default.cells, a.only, []) if c.excluded is None]
    work = Path(tempfile.mkdtemp(prefix="ci-scale-", dir="/var/tmp"))
    runs = ROOT / "runs" / f"ci-scale-{time.strftime('%Y%m%d-%H%M%S')}"   # kept: every build's log
    runs.mkdir(parents=True)
    rows: list[tuple[str, float]] = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        registry = RegistryServer(work / "registry")
        registry.folder.mkdir()
        stack.callback(registry.stop)
        registry.start()
        engine = stack.enter_context(second_engine(work / "engine", nat=True))
        cache_ref = f"{registry.url}/sglang-images/cache"
        if "cold" not in a.skip:
            seconds, _ = build(engine, runs, "cold", a.only, "--no-verify")
            rows.append(("second runner, no cache: cold build", seconds))
            engine.wipe()
        exporting, _ = build(engine, runs, "export", a.only, "--no-verify", "--cache-ref", cache_ref)
        rows.append(("first runner, cold build exporting the cache", exporting))
        engine.wipe()
        cached, cached_results = build(engine, runs, "with-cache", a.only, "--no-verify", "--cache-ref", cache_ref)
        rows.append(("second runner, with the cache", cached))
        verify_first, _ = build(engine, runs, "verify", a.only)
        rows.append(("verification of the built cells", verify_first))
        noop, noop_results = build(engine, runs, "noop", a.only)
        rows.append(("no-op rerun with verification (results reused)", noop))
        if "naive" not in a.skip:
            naive = 0.0
            for cell in cells:
                engine.wipe()
                seconds, _ = build(engine, runs, f"naive-{cell.id}", [cell.id], "--no-verify")
                naive += seconds
            rows.append((f"naive: each of the {len(cells)} cells alone from an empty cache", naive))
        floor_s, wheels = floor(cells, ROOT / "lockfiles")
        rows.append((f"floor: {wheels} unique wheels fetched and installed once, outside Docker", floor_s))
    reused = sum(1 for c in noop_results["cells"] if c.get("reused_from"))
    base = rows[0][1]
    lines = [
        "# CI at scale", "",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.machine()}, {os.cpu_count()} cores), "
        f"`python benchmarks/ci_scale.py{''.join(' --only ' + o for o in a.only)}"
        f"{''.join(' --skip ' + o for o in a.skip)}`: {len(cells)} cell(s) "
        f"({', '.join(c.id for c in cells)}), on a second engine (Docker 26, containerd image store) with a loopback "
        f"registry for the shared cache. One run; ratios to the first row.", "",
        "| what | seconds | ratio |", "| --- | ---: | ---: |",
        *(f"| {name} | {secs:.1f} | {secs / base:.3f} |" for name, secs in rows), "",
        f"With the cache, layers really built per cell: {json.dumps(rebuilt_layers(cached_results))} "
        f"(every other layer came from the registry). The no-op rerun reused {reused} cell(s)' verification.",
    ]
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
