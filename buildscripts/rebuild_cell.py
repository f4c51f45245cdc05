"""`compare --rebuild CELL`: the cell built again from cold beside the image `nox -s build` made of the same inputs,
and the two compared file by file (compare/).

The rebuild is a build aside (aside.py) with every layer built again (`--no-cache`: every wheel downloaded and
installed, the kernels baked again; the base image is the same one, as a cell's build uses it; no shared cache read
or written), on the builder the build would use (`--builder`), stamped where that builder can (BuildKit >= 0.13:
SOURCE_DATE_EPOCH and rewrite-timestamp, docs/reproducible-builds.md). It is not verified: the question is whether
the bytes are the same, not whether they work. The rebuilt image has a tag of its own repository
(`REPOSITORY-rebuild:CELL-INPUTS`) while it is compared; it goes afterwards, or with `--keep` at the next rebuild
of the cell.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from . import log
from .aside import Aside, built
from .compare import diff, images
from .compare.diff import Comparison
from .errors import RebuildFailed
from .matrix import Cell, Matrix
from .matrix.cells import buildable
from .pipeline_options import BuildOptions
from .results import Status
from .workspace import Workspace

REPOSITORY_SUFFIX = "-rebuild"   # the rebuilt images' own repository beside the matrix's: never a tag the build uses


@dataclass(frozen=True)
class Rebuilt:
    """What `compare --rebuild` found: the two images, their comparison, how long the cold build took."""

    reference: str
    rebuilt: str
    comparison: Comparison
    build_s: float
    layers: dict[str, float]


def cell_of(matrix: Matrix, cell_id: str) -> Cell:
    return buildable(matrix.cells, cell_id, where="the matrix", doing="it cannot be rebuilt",
                     hint="`nox -s matrix` lists the cells that build")


def rebuild(ws: Workspace, env: Mapping[str, str], matrix: Matrix, cell: Cell, *, builder: str | None, keep: bool,
            run_id: str) -> Rebuilt:
    """Build `cell` again from cold and compare it with the image the build made of the same inputs."""
    opts = BuildOptions(ws=ws, matrix=matrix, env=env, run_id=run_id, verify=False, keep_superseded=True,
                        cache_keep=None, builder=builder, cold=True, cache_ref="")
    started = time.monotonic()
    with built(Aside(matrix, REPOSITORY_SUFFIX), cell, opts, against_candidate=True, keep=keep) as made:
        build = made.record.build
        if build is None or build.status is not Status.PASSED:
            why = build.reason if build is not None else made.record.verdict
            msg = f"the cold rebuild of {cell.id} failed: {why}"
            raise RebuildFailed(msg, hint=f"its log: {build.log if build else ws.run_dir(run_id)}")
        seconds = round(time.monotonic() - started, 1)
        with log.working(f"comparing {made.candidate} with {made.tag}"):
            comparison = diff.compare(images.read(made.client, made.candidate), images.read(made.client, made.tag))
        return Rebuilt(reference=made.candidate, rebuilt=made.tag, comparison=comparison, build_s=seconds,
                       layers=dict(build.layers))
