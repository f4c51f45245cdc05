"""The bad side of the real bisection (benchmarks/bisect-real.md): a cell's committed layer locks with some packages
moved to other real versions from the package index, resolved by the lock step's own resolver call.

    python benchmarks/bisect_real_side.py CELL OUT NAME==VERSION ...

Each layer is resolved again with `lock.resolver.compile_requirements` (uv pip compile --generate-hashes, for the
lock's Python and platform, from the lane's index as `nox -s lock` asks it), for the layer's own requirements, with
every other pin of the committed lock kept as a constraint and the moved packages pinned at their new versions: uv
checks that the set holds together and writes each entry with the index's hashes. The locks keep the committed
headers (same inputs, so the build's lock check takes them), the constraints hash chained to the new layer below and
the content hash of the new body. OUT is a lockfiles folder (lanes/, sglang/, toolkits/ as the cell has them) for
`bisect --bad OUT`. A set the resolver refuses stops with uv's reason.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from buildscripts import matrix as matrix_mod  # noqa: E402
from buildscripts.bisect.folder import layer_paths  # noqa: E402
from buildscripts.hostenv import uv_settings  # noqa: E402
from buildscripts.lock import lockfile  # noqa: E402
from buildscripts.lock.lockfile import Lockfile, normalize, sha256  # noqa: E402
from buildscripts.lock.resolver import Target, compile_requirements  # noqa: E402


def moved_layer(lock: Lockfile, below: Lockfile | None, moves: dict[str, str], env: dict[str, str]) -> Lockfile:
    """`lock` resolved again with `moves` pinned, the rest of its pins (and the layer below's) as constraints."""
    keep = {n: p.version for n, p in lock.pins.items() if n not in moves}
    under = {n: p.version for n, p in (below.pins if below else {}).items()}
    here = {n: v for n, v in moves.items() if n in lock.pins}
    constraints = [f"{n}=={v}" for n, v in sorted({**keep, **under, **here}.items())]
    done = compile_requirements(lock.header["requirements"].split(), Target(lock.header["python"],
                                                                              lock.header["platform"]),
                                constraints=constraints, env=env)
    if not done.ok:
        msg = f"the resolver refuses {lock.header['layer']} with {here}: {done.error}"
        raise SystemExit(msg)
    header = dict(lock.header)
    if below is not None and "constraints-sha256" in header:
        header["constraints-sha256"] = sha256(below.body)
    header["content-sha256"] = sha256(done.body)
    return replace(lock, header=header, body=done.body)


def main(argv: list[str]) -> int:
    cell_id, out, specs = argv[0], Path(argv[1]), argv[2:]
    moves = {normalize(s.split("==")[0]): s.split("==")[1] for s in specs}
    matrix = matrix_mod.load(ROOT / "matrix.yaml", os.environ)
    cell = next(c for c in matrix.cells if c.id == cell_id)
    env = uv_settings(os.environ)
    if cell.lane.index:
        env = {**env, "UV_DEFAULT_INDEX": cell.lane.index, "UV_INDEX": ""}
    below: Lockfile | None = None
    for (_, good_path), (_, out_path) in zip(layer_paths(cell, ROOT / "lockfiles"), layer_paths(cell, out),
                                             strict=True):
        lock = moved_layer(lockfile.verify(good_path), below, moves, env)
        lockfile.write(out_path, lock)
        print(f"{out_path}: {len(lock.pins)} packages", flush=True)
        below = lock
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
