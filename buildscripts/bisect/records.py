"""The good and bad records a bisection starts from: the stage and class it bisects, the decisive lines, where.

Read with the results room's loader; nothing is judged again here (the record's verdict and classes stand).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ResultsError
from ..results import CellResult, StageResult, load
from ..results.decisive import EVIDENCE_KEY
from .search import Target

EXCERPT_LINES = 6


@dataclass(frozen=True)
class Seen:
    """One record of the cell: what a person reads of it in the hand-back."""

    path: str
    cell: CellResult

    def line(self) -> str:
        c = self.cell
        why = f" ({c.verdict_reason})" if c.verdict_reason else ""
        return f"{self.path}: {c.verdict.value}{why}; run {c.run_id or '?'} on {c.runner or '?'}"

    def failed(self) -> StageResult | None:
        return self.cell.first_failure()

    def where(self) -> str:
        stage = self.failed()
        return stage.where if stage else (self.cell.runner or "unknown")


def read_record(path: Path, cell_id: str) -> Seen:
    run = load(path)
    cell = run.cell(cell_id)
    if cell is None:
        names = ", ".join(c.cell_id for c in run.cells[:5]) or "none"
        msg = f"{path} has no record of {cell_id} (it holds {names})"
        raise ResultsError(msg, hint="give the results.json of a run that built this cell")
    return Seen(str(path), cell.model_copy(update={"run_id": cell.run_id or run.run_id,
                                                   "runner": cell.runner or run.runner}))


def target_of(bad: Seen) -> Target:
    failed = bad.failed()
    if failed is None:
        msg = f"the bad record {bad.path} of {bad.cell.cell_id} failed no stage ({bad.cell.verdict.value})"
        raise ConfigError(msg, hint="give a record whose cell failed a stage, or name the stage with --stage")
    return Target(failed.name, failed.failure_class)


def decisive_lines(stage: StageResult | None) -> tuple[str, ...]:
    """The lines that say what broke: the classifier's decisive line, the reason, the excerpt's last lines."""
    if stage is None:
        return ()
    found = [str(stage.evidence.get(EVIDENCE_KEY) or ""), stage.reason or ""]
    found += (stage.log_excerpt or "").splitlines()[-EXCERPT_LINES:]
    lines: list[str] = []
    for line in (x.strip() for x in found):
        if line and line not in lines:
            lines.append(line)
    return tuple(lines)
