"""One step of a bisection, built for real: the cell built from the step's locks and verified up to the stage
bisected, nothing past it, read back as the search's outcome (bisect/search.py's `Build`).

The step goes through the build's own pieces (pipeline.prepare, check_locks, run_cell), so it builds on the
same base and recipe and meets the same BuildKit cache: a layer whose lock the step leaves as the good side's
is a cache hit (the lock is copied in by name and content, not by path), and the step's line says, layer by
layer, which were. What the normal build does after a cell is left out on purpose: a step is never tagged good
(no tag step), never staged or promoted, removes and supersedes nothing (no cache bound after it), and its record
is not sealed, so it vouches for nothing. What the build does before a cell it builds is kept: on a disk short of
room, the BuildKit cache that no image holds goes first (build/footprint.py's make_room). A step's layers are held
by no image once its tag is gone, so each step makes room for the next; without it a bisection on an 80 GB runner
was refused at its third step (some 12 GB of unheld layers a step, an 11 GB download cache). Its image has a
tag of its own repository (`REPOSITORY-bisect:CELL-INPUTS`, never one the build or `tag` uses) only while the step
runs: the tag goes when the step ends, however it ends; one left by a killed bisection goes when the next
bisection of the cell starts. Each step's locks, logs and results.json are in runs/bisect-CELL/step-N/.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import engine, log, pipeline, results
from .bisect.compose import composed_locks
from .bisect.diff import Change
from .bisect.folder import write_step_folder
from .bisect.outcome import outcome_of
from .bisect.search import Outcome
from .bisect.sources import Side
from .build import footprint
from .errors import BisectError
from .lock.lockfile import Pin
from .matrix import Cell, Matrix
from .pipeline_options import BuildOptions
from .results import CellResult, RunResults
from .trust import seal
from .workspace import Workspace

if TYPE_CHECKING:
    import docker

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
        client = engine.connect()
        found = engine.check(client)
        run_dir = ws.run_dir(name)
        ctx = pipeline.prepare(client, self.matrix, [self.cell], opts, run_dir)
        # The good side's cells are images, so their layers stay cache hits: what goes is earlier steps' layers
        # and the download caches (a keep of 0 only says "bounded": make_room prunes whole when short).
        footprint.make_room(engine.local_root(found, self.env), 0, ctx.builder.name, ctx.builder.driver)
        engine.check_disk(found, 1)
        inputs, _ = ctx.candidates[self.cell.id]
        tag = step_tag(self.matrix, self.cell, inputs)
        ctx.candidates[self.cell.id] = (inputs, tag)
        status = pipeline.check_locks(self.matrix, [self.cell], ws)[self.cell.id]
        run = RunResults(run_id=name, started=results.now(), matrix=str(ws.matrix),
                         matrix_digest=results.matrix_digest(self.matrix.spec))
        try:
            record = pipeline.run_cell(self.cell, self.matrix, status, ctx, opts, run_dir)
        finally:
            untag(client, self.matrix, [tag])
        run.finished = results.now()
        # Not sealed (key None): a step's record is the bisection's evidence, never a verdict `tag` may act on.
        return seal.record(run, record, None, run_dir / "results.json", definition=self.cell.definition)


def step_tag(matrix: Matrix, cell: Cell, inputs: str) -> str:
    return f"{step_repository(matrix)}:{cell.id}-{inputs}"


def step_repository(matrix: Matrix) -> str:
    return matrix.spec.tags.repository + REPOSITORY_SUFFIX


def layers_line(record: CellResult) -> str:
    """Each layer of the step's build: a cache hit, or built in so many seconds."""
    build = record.build
    if build is None:
        return "not built"
    if not build.layers:
        return "layers: " + ("all cached" if build.cached else "no layer times in the log")
    said = [f"{stage} {'cache hit' if secs == 0 else f'built {secs:.1f} s'}" for stage, secs in build.layers.items()]
    return "layers: " + ", ".join(said)


def leftovers(client: docker.DockerClient, matrix: Matrix, cell: Cell) -> list[str]:
    """Tags of the steps' repository for `cell` that a killed bisection left behind."""
    prefix = f"{step_repository(matrix)}:{cell.id}-"
    return sorted(t for image in client.images.list(name=step_repository(matrix)) for t in image.tags
                  if t.startswith(prefix))


def untag(client: docker.DockerClient, matrix: Matrix, refs: Sequence[str]) -> None:
    """Remove those of `refs` that are tags of the steps' own repository (the image goes with its last tag; the
    layers other images or the cache hold stay). A tag not there is fine; an engine that refuses is said."""
    import docker.errors  # the SDK where the engine is reached, not at import (cli.py)

    for ref in refs:
        if not ref.startswith(f"{step_repository(matrix)}:"):
            continue   # never a tag of the build's, whatever a caller passes
        try:
            client.images.remove(ref, noprune=False)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as exc:
            log.warn(f"the step's tag {ref} was not removed (the engine said: {exc}); `docker rmi {ref}` removes it")

