"""Merge the results of several runs (CI runners, a GPU test machine, earlier runs) into one record.

Newest wins: per cell for the cell's own record (build, image, versions), per cell × stage for the
CPU stages, and per cell × stage × GPU arch for the GPU stages, so that two runners that verified
the same cell on different GPUs (one on sm_100, one on sm_120) both stay in the row. A GPU stage
that did not run on a GPU (skipped: no GPU there) is kept only while no GPU result of that stage
exists: it says nothing about a GPU. "Newest" is the newest time the run's cell records carry (sealed with
them), else the run's own `finished` (else `started`).

Results of one build stay together: a newer record of another image under the same cell id drops
the older stages, unless both name the same candidate tag, which is content-addressed (a hash of
every build input), so two runners that built it built the same inputs. Provenance is kept: each
stage carries the run id, runner and time it came from, each cell the run its record came from.
Verdicts are then judged again from the merged stages, never copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .. import results
from ..errors import ResultsError
from ..results import GPU_STAGES, LADDER, CellResult, RunResults, StageResult, family

StageKey = tuple[str, str]  # (stage name, GPU arch family or "" for a stage that ran on no GPU)


def when(run: RunResults) -> datetime:
    """When the run's records were made: the newest time its sealed cell records carry (inside their seals),
    else the run's own (outside every seal: a run re-dated by hand must not outrank a newer sealed record; an
    unsealed record's own time is worth no more than the run's)."""
    stamps = [cell.finished for cell in run.cells if cell.finished and cell.seal] or [run.finished or run.started]
    return max(_parsed(stamp, run) for stamp in stamps)


def _parsed(stamp: str, run: RunResults) -> datetime:
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        msg = f"run {run.run_id}: time {stamp!r} is not an ISO 8601 timestamp"
        raise ResultsError(msg, hint="re-run the verification to regenerate the file") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _stamped(stage: StageResult, run: RunResults, cell: CellResult) -> StageResult:
    """The stage with its provenance filled in (what a stage merged before has, it keeps): the run, and
    the image it ran in, since records of two builds of the same inputs merge (`same_build`)."""
    update = {} if stage.run_id else {"run_id": run.run_id, "runner": run.runner,
                                      "finished": run.finished or run.started}
    if not stage.image_id and cell.image.id:
        update["image_id"] = cell.image.id
    return stage.model_copy(update=update) if update else stage


def _key(stage: StageResult) -> StageKey:
    return (stage.name, family(stage.arch) if stage.name in GPU_STAGES and stage.arch else "")


def same_build(older: CellResult, newer: CellResult) -> bool:
    """Both records tested one build: the same manifest digest (a staging build and the GPU jobs that pulled
    it: engines may name one image by different ids), the same image id, or the same content-addressed
    candidate tag."""
    if older.image.digest and newer.image.digest:
        return older.image.digest == newer.image.digest
    if older.image.id == newer.image.id:
        return True
    ids = (older.image.id or "", newer.image.id or "")
    return all(i.startswith("sha256:") for i in ids) and bool(newer.image.ref) and older.image.ref == newer.image.ref


def merged_stages(by_key: dict[StageKey, StageResult]) -> list[StageResult]:
    """Ladder order, archs in order; a GPU stage that ran on no GPU only where no GPU result of it exists."""
    on_gpu = {name for name, arch in by_key if arch}
    kept = [(key, stage) for key, stage in by_key.items() if key[1] or key[0] not in on_gpu]
    order = {name: i for i, name in enumerate(LADDER)}
    kept.sort(key=lambda item: (order.get(item[0][0], len(order)), results.arch_key(item[0][1])))
    return [stage for _, stage in kept]


def merge(runs: Sequence[RunResults]) -> RunResults:
    """One RunResults: newest cell record, newest stage result per stage (and GPU arch); verdicts re-judged."""
    if not runs:
        msg = "no results to merge"
        raise ResultsError(msg, hint="run `nox -s build` first, or pass --results GLOB")
    if len(runs) == 1:
        return _rejudged(runs[0].model_copy(deep=True))
    ordered = sorted(runs, key=when)  # oldest first: later runs overwrite
    cells: dict[str, CellResult] = {}
    stages: dict[str, dict[StageKey, StageResult]] = {}
    for run in ordered:
        for cell in run.cells:
            record = cell.model_copy(deep=True, update={
                "run_id": cell.run_id or run.run_id, "runner": cell.runner or run.runner,
                "finished": cell.finished or run.finished or run.started,
            })
            older = cells.get(cell.cell_id)
            if older is not None and not same_build(older, record):
                # Another build under the same cell id: its stages say nothing about this one.
                stages.pop(cell.cell_id, None)
            cells[cell.cell_id] = record
            by_key = stages.setdefault(cell.cell_id, {})
            for stage in cell.stages:
                by_key[_key(stage)] = _stamped(stage, run, cell)
    merged_cells = [cell.model_copy(update={"stages": merged_stages(stages[cell_id])})
                    for cell_id, cell in cells.items()]
    newest = ordered[-1]
    digests = {r.matrix_digest for r in ordered}
    merged = RunResults(
        run_id="merged:" + "+".join(r.run_id for r in ordered),
        started=min(ordered, key=lambda r: r.started).started,
        finished=newest.finished, runner=", ".join(dict.fromkeys(r.runner for r in ordered)),
        host={}, matrix=newest.matrix, matrix_digest=digests.pop() if len(digests) == 1 else None,
        cells=sorted(merged_cells, key=lambda c: c.cell_id),
    )
    return _rejudged(merged)


def _rejudged(run: RunResults) -> RunResults:
    """Verdicts as `judge` makes them from the merged stages (a stored verdict is never trusted)."""
    return run.model_copy(update={"cells": [results.judged(cell) for cell in run.cells]})


def load_all(paths: Iterable[Path]) -> list[RunResults]:
    """Load every file; the first unreadable one is an error naming that file (from results.load)."""
    return [results.load(path) for path in paths]
