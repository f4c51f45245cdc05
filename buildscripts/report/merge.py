"""Merge the results of several runs (CI runners, a GPU test machine, earlier runs) into one record.

Newest wins, per cell for the cell's own record (build, image, versions) and per cell × stage for
stage results; "newest" is the run's `finished` time (else `started`). Provenance is kept: each
stage carries the run id, runner and time it came from, and each cell the run its record came
from. Verdicts are then judged again from the merged stages, never copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .. import results
from ..errors import ResultsError
from ..results import CellResult, RunResults, StageResult


def _when(run: RunResults) -> datetime:
    stamp = run.finished or run.started
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        msg = f"run {run.run_id}: time {stamp!r} is not an ISO 8601 timestamp"
        raise ResultsError(msg, hint="re-run the verification to regenerate the file") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _stamped(stage: StageResult, run: RunResults) -> StageResult:
    """The stage with its provenance filled in (a stage merged before keeps its own)."""
    if stage.run_id:
        return stage
    return stage.model_copy(update={"run_id": run.run_id, "runner": run.runner,
                                    "finished": run.finished or run.started})


def merge(runs: Sequence[RunResults]) -> RunResults:
    """One RunResults: newest cell record and newest stage result win; verdicts re-judged."""
    if not runs:
        msg = "no results to merge"
        raise ResultsError(msg, hint="run `nox -s build` first, or pass --results GLOB")
    if len(runs) == 1:
        return _rejudged(runs[0].model_copy(deep=True))
    ordered = sorted(runs, key=_when)  # oldest first: later runs overwrite
    cells: dict[str, CellResult] = {}
    stages: dict[str, dict[str, StageResult]] = {}
    for run in ordered:
        for cell in run.cells:
            record = cell.model_copy(deep=True, update={
                "run_id": cell.run_id or run.run_id, "runner": cell.runner or run.runner,
                "finished": cell.finished or run.finished or run.started,
            })
            older = cells.get(cell.cell_id)
            if older is not None and older.image.id != record.image.id:
                # Another image under the same cell id: its stages say nothing about this one.
                stages.pop(cell.cell_id, None)
            cells[cell.cell_id] = record
            by_name = stages.setdefault(cell.cell_id, {})
            for stage in cell.stages:
                by_name[stage.name] = _stamped(stage, run)
    merged_cells = [cell.model_copy(update={"stages": list(stages[cell_id].values())})
                    for cell_id, cell in cells.items()]
    newest = ordered[-1]
    merged = RunResults(
        run_id="merged:" + "+".join(r.run_id for r in ordered),
        started=min(ordered, key=lambda r: r.started).started,
        finished=newest.finished, runner=", ".join(dict.fromkeys(r.runner for r in ordered)),
        host={}, matrix=newest.matrix, cells=sorted(merged_cells, key=lambda c: c.cell_id),
    )
    return _rejudged(merged)


def _rejudged(run: RunResults) -> RunResults:
    """Verdicts as `judge` makes them from the merged stages (a stored verdict is never trusted)."""
    return run.model_copy(update={"cells": [results.judged(cell) for cell in run.cells]})


def load_all(paths: Iterable[Path]) -> list[RunResults]:
    """Load every file; the first unreadable one is an error naming that file (from results.load)."""
    return [results.load(path) for path in paths]
