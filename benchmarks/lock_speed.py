"""Measure `nox -s lock` on the default matrix: cold uv cache, warm uv cache, and a no-op re-run.

    python benchmarks/lock_speed.py [--matrix matrix.yaml] [--out benchmarks/lock-results.md]

Locks into a scratch copy of the project (the committed lockfiles/ are not touched). "Cold" uses
an empty temporary UV_CACHE_DIR, "warm" re-resolves every layer (--upgrade) with that cache filled
(online, then offline),
"no-op" is a plain re-run with unchanged inputs (every lock reused, no resolver call). Also counts
distinct torch layers (lane lock contents) against cells: cells of a lane share one torch layer.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from buildscripts import lock
from buildscripts import matrix as matrix_mod
from buildscripts.lock.resolver import uv_version
from buildscripts.workspace import Workspace


def timed(matrix: matrix_mod.Matrix, root: Path, env: dict[str, str], *, upgrade: bool) -> tuple[float, int]:
    started = time.monotonic()
    results = lock.lock_cells(matrix, list(matrix.buildable()), Workspace.at(root), upgrade=upgrade, env=env,
                              prune=True)
    return time.monotonic() - started, sum(s.state == "ok" for s in results.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=Path("matrix.yaml"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/lock-results.md"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lock-bench-") as scratch:
        root = Path(scratch)
        shutil.copyfile(args.matrix, root / "matrix.yaml")
        matrix = matrix_mod.load(root / "matrix.yaml", dict(os.environ))
        env = {**os.environ, "UV_CACHE_DIR": str(root / "uv-cache")}
        cold, ok = timed(matrix, root, env, upgrade=True)
        warm, _ = timed(matrix, root, env, upgrade=True)
        offline, _ = timed(matrix, root, {**env, "UV_OFFLINE": "1"}, upgrade=True)
        noop, _ = timed(matrix, root, env, upgrade=False)
        cells = matrix.buildable()
        lanes = {lock.paths_for(c, root / "lockfiles").lane for c in cells}
        contents = {hashlib.sha256(p.read_bytes()).hexdigest() for p in lanes if p.is_file()}
        sglang_layers = {lock.paths_for(c, root / "lockfiles").sglang for c in cells}
        toolkit_layers = {t for c in cells if (t := lock.paths_for(c, root / "lockfiles").toolkit)}
    rows = [
        ("cold uv cache (empty UV_CACHE_DIR, every layer resolved)", f"{cold:.1f} s"),
        ("warm uv cache (`--upgrade`: every layer resolved again)", f"{warm:.1f} s"),
        ("warm uv cache, offline (`UV_OFFLINE=1`: no index revalidation)", f"{offline:.1f} s"),
        ("no-op re-run (inputs unchanged: every lock reused)", f"{noop:.1f} s"),
        ("cells locked ok / buildable cells", f"{ok} / {len(cells)}"),
        ("distinct torch layers (lane locks) / cells", f"{len(contents)} / {len(cells)}"),
        ("SGLang layer locks / toolkit layer locks", f"{len(sglang_layers)} / {len(toolkit_layers)}"),
    ]
    text = "\n".join([
        "# Locking speed (`benchmarks/lock_speed.py`)",
        "",
        f"Default matrix.yaml, uv {uv_version()}, Python {platform.python_version()} on "
        f"{platform.system()} {platform.machine()} ({os.cpu_count()} cores). Resolution reads package "
        "metadata only (no wheels are downloaded). Online, uv revalidates each project's index page on "
        "every run, so a warm cache saves little; the offline row is the resolver's own cost.",
        "",
        "| measure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows),
        "",
    ])
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
