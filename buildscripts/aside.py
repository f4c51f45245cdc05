"""A cell built aside: through the build's own pieces (pipeline.prepare, check_locks, run_cell), so on the same
base, recipe and BuildKit cache as `nox -s build`, but under a tag of a repository of its own
(`REPOSITORY-SUFFIX:CELL-INPUTS`, never one the build or `tag` uses), and with nothing of what the build does after
a cell: never tagged good, staged or promoted, nothing removed or superseded, no cache bound after it. A bisection's
step (bisect_step.py) and a cold rebuild to compare (rebuild_cell.py) are such builds.

What the build does before a cell it builds is kept: on a disk short of room, the BuildKit cache that no image
holds goes first (build/footprint.py's make_room). The tag lives only while the caller uses the image (or until
the next run of that kind for the cell, when the caller asked to keep it): it goes when the `built` block ends,
however it ends; one a killed run left goes when the next build of that kind for the cell starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import engine, log, pipeline, results
from .build import footprint
from .errors import SelectionError
from .matrix import Cell, Matrix
from .pipeline_options import BuildOptions
from .results import CellResult, RunResults

if TYPE_CHECKING:
    import docker


@dataclass(frozen=True)
class Aside:
    """Where a kind of build aside puts its images: the matrix's repository with `suffix` (`-bisect`, `-rebuild`)."""

    matrix: Matrix
    suffix: str

    @property
    def repository(self) -> str:
        return self.matrix.spec.tags.repository + self.suffix

    def tag(self, cell: Cell, inputs: str) -> str:
        return f"{self.repository}:{cell.id}-{inputs}"

    def leftovers(self, client: docker.DockerClient, cell: Cell) -> list[str]:
        """Tags of this repository for `cell` that a killed run left behind."""
        prefix = f"{self.repository}:{cell.id}-"
        return sorted(t for image in client.images.list(name=self.repository) for t in image.tags
                      if t.startswith(prefix))

    def untag(self, client: docker.DockerClient, refs: Sequence[str]) -> None:
        """Remove those of `refs` that are tags of this repository (the image goes with its last tag; the layers
        other images or the cache hold stay). A tag not there is fine; an engine that refuses is said."""
        import docker.errors  # the SDK where the engine is reached, not at import (cli.py)

        for ref in refs:
            if not ref.startswith(f"{self.repository}:"):
                continue   # never a tag of the build's, whatever a caller passes
            try:
                client.images.remove(ref, noprune=False)
            except docker.errors.ImageNotFound:
                pass
            except docker.errors.DockerException as exc:
                log.warn(f"the tag {ref} was not removed (the engine said: {exc}); `docker rmi {ref}` removes it")


@dataclass(frozen=True)
class Built:
    """A cell built aside: its record (not sealed), the tag of the image built, and the candidate tag the build
    gives the cell's current inputs (the image `nox -s build` made of them, if it did)."""

    record: CellResult
    run: RunResults
    tag: str
    candidate: str
    client: docker.DockerClient        # the engine it was built in, which holds both images


@contextmanager
def built(aside: Aside, cell: Cell, opts: BuildOptions, *, against_candidate: bool = False,
          keep: bool = False) -> Iterator[Built]:
    """Build (and verify up to opts.stages, when opts.verify) `cell` under `aside`'s tag; the tag goes on exit
    unless `keep`. `against_candidate`: the build is to be held against the image the build made of the same
    inputs, so without that image it is refused before anything is built."""
    import docker.errors  # the SDK where the engine is reached, not at import (cli.py)

    client = engine.connect()
    found = engine.check(client)
    run_dir = opts.ws.run_dir(opts.run_id)
    ctx = pipeline.prepare(client, aside.matrix, [cell], opts, run_dir)
    # The cells the build made are images, so their layers stay cache hits: what goes is earlier builds aside and
    # the download caches (a keep of 0 only says "bounded": make_room prunes whole when short).
    footprint.make_room(engine.local_root(found, opts.env), 0, ctx.builder.name, ctx.builder.driver)
    engine.check_disk(found, 1)
    inputs, candidate = ctx.candidates[cell.id]
    if against_candidate:
        try:
            client.images.get(candidate)
        except docker.errors.ImageNotFound:
            msg = f"there is no image of {cell.id} for its inputs as they are now ({candidate})"
            raise SelectionError(msg, hint=f"build it first: nox -s build -- --only {cell.id} --no-verify") from None
    tag = aside.tag(cell, inputs)
    left = aside.leftovers(client, cell)         # a tag left by a killed run would pass for this very build
    if left:
        log.info(f"removing {len(left)} tag(s) of {aside.repository} an earlier run left: {', '.join(left)}")
        aside.untag(client, left)
    ctx.candidates[cell.id] = (inputs, tag)
    status = pipeline.check_locks(aside.matrix, [cell], opts.ws)[cell.id]
    run = RunResults(run_id=opts.run_id, started=results.now(), matrix=str(opts.ws.matrix),
                     matrix_digest=results.matrix_digest(aside.matrix.spec))
    try:
        record = pipeline.run_cell(cell, aside.matrix, status, ctx, opts, run_dir)
        run.finished = results.now()
        yield Built(record=record, run=run, tag=tag, candidate=candidate, client=client)
    finally:
        if not keep:
            aside.untag(client, [tag])
