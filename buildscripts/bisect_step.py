"""One step of a bisection, built for real: the cell built from the step's locks and verified up to the stage
bisected, nothing past it, read back as the search's outcome (bisect/search.py's `Build`).

The step is a build aside (aside.py): through the build's own pieces, so it builds on the same base and recipe and
meets the same BuildKit cache: a layer whose lock the step leaves as the good side's is a cache hit (the lock is
copied in by name and content, not by path), and the step's line says, layer by layer, which were. A step is never
tagged good, never staged or promoted, removes and supersedes nothing, and its record is not sealed, so it vouches
for nothing. On a disk short of room the BuildKit cache that no image holds goes first, as before a cell of the
build: a step's layers are held by no image once its tag is gone, so each step makes room for the next; without it
a bisection on an 80 GB runner was refused at its third step (some 12 GB of unheld layers a step, an 11 GB download
cache). Its image has a tag of its own repository (`REPOSITORY-bisect:CELL-INPUTS`) only while the step runs; one
left by a killed bisection goes when the next bisection of the cell starts. Each step's locks, logs and
results.json are in runs/bisect-CELL/step-N/.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from . import log
from .aside import Aside, built
from .bisect.compose import composed_locks
from .bisect.diff import Change
from .bisect.folder import write_step_folder
from .bisect.outcome import outcome_of
from .bisect.search import Outcome
from .bisect.sources import Side
from .errors import BisectError
from .lock.lockfile import Pin
from .matrix import Cell, Matrix
from .pipeline_options import BuildOptions
from .results import CellResult
from .trust import seal
from .workspace import Workspace

REPOSITORY_SUFFIX = "-bisect"   # the steps' own repository beside the matrix's: never a tag the build uses


@dataclass(frozen=True, kw_only=True)
class StepBuild:
    """The search's `Build` for one cell: made once per bisection, called once per step."""

    ws: Workspace                  # the project's (its lockfiles/ has the bootstrap lock; runs/ the steps' home)
    env: Mapping[str, str]
    matrix: Matrix
    cell: Cell
    good: Side
    bad: Side
    changes: tuple[Change, ...]    # the whole diff: a step moves those whose pin it asks for
    stages: tuple[str, ...]        # the ladder up to the stage bisected (none for a build failure)

    @property
    def home(self) -> Path:
        return self.ws.runs / f"bisect-{self.cell.id}"

    def __call__(self, pins: Mapping[str, Pin], label: str) -> Outcome:
        moved = [c for c in self.changes if pins.get(c.name) != self.good.pins.get(c.name)]
        name = label.replace(" ", "-")
        locks = write_step_folder(self.home / name / "lockfiles", self.matrix, self.cell,
                                  composed_locks(self.good, self.bad, moved), project_locks=self.ws.locks)
        started = time.monotonic()
        record = self.build(name, locks)
        outcome = outcome_of(record, self.stages)
        log.info(f"{label}: {len(moved)} change(s) moved ({', '.join(c.name for c in moved)}); {layers_line(record)}; "
                 f"{outcome.line()}; {time.monotonic() - started:.0f} s")
        return outcome

    def build(self, name: str, locks: Path) -> CellResult:
        """Build and verify the cell from the lockfiles folder `locks`; the record saved in the step's folder."""
        if not locks.resolve().is_relative_to(self.ws.root.resolve()):
            msg = f"the step's locks {locks} are outside the project folder, which is the build's context"
            raise BisectError(msg, hint="keep runs/ inside the project folder for a bisection (no --runs elsewhere)")
        ws = replace(self.ws, locks=locks, runs=self.home)
        opts = BuildOptions(ws=ws, matrix=self.matrix, env=self.env, run_id=name, stages=self.stages,
                            verify=bool(self.stages), reverify=True, keep_superseded=True, cache_keep=None)
        with built(aside_of(self.matrix), self.cell, opts) as step:
            # Not sealed (key None): a step's record is the bisection's evidence, never a verdict `tag` may act on.
            return seal.record(step.run, step.record, None, ws.run_dir(name) / "results.json",
                               definition=self.cell.definition)


def aside_of(matrix: Matrix) -> Aside:
    """The steps' own repository beside the matrix's: never a tag the build uses."""
    return Aside(matrix, REPOSITORY_SUFFIX)


def layers_line(record: CellResult) -> str:
    """Each layer of the step's build: a cache hit, or built in so many seconds."""
    build = record.build
    if build is None:
        return "not built"
    if not build.layers:
        return "layers: " + ("all cached" if build.cached else "no layer times in the log")
    said = [f"{stage} {'cache hit' if secs == 0 else f'built {secs:.1f} s'}" for stage, secs in build.layers.items()]
    return "layers: " + ", ".join(said)
