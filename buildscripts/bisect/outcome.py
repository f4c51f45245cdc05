"""A step's record read back as the search's outcome: PASS, FAIL at a stage with its class, or ERROR.

The record is the cell's results entry, as a build writes it (results/record.py); nothing is judged again here:
a stage the record says failed is a failure at that stage with the record's class, its decisive lines the
classifier's line, the reason and the excerpt's last lines (records.decisive_lines). Whether that failure is
the one bisected (else OTHER) is the target's to say (search.Target.judge), not this reader's.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..results import CellResult, Status
from .records import decisive_lines
from .report import BUILD
from .search import Outcome, Verdict


def outcome_of(record: CellResult, stages: Sequence[str]) -> Outcome:
    """The outcome of a step that built the cell and ran `stages` (the ladder up to the stage bisected)."""
    build = record.build
    if build is None:
        why = record.excluded or "the cell was not built"
        return Outcome(Verdict.ERROR, why=f"not built: {why}")
    if build.status is Status.FAILED:
        reason = build.reason or "the build failed"
        return Outcome(Verdict.FAIL, BUILD, None, reason, (reason,))
    if build.status is not Status.PASSED:
        return Outcome(Verdict.ERROR, BUILD, why=f"not built: {build.reason or build.status.value}")
    ran = {s.name: s for s in record.stages}
    for name in stages:
        stage = ran.get(name)
        if stage is None:
            return Outcome(Verdict.ERROR, name, why=f"{name} has no record: the verification stopped before it")
        if stage.status is Status.FAILED:
            return Outcome(Verdict.FAIL, name, stage.failure_class, stage.reason or "", decisive_lines(stage))
        if stage.status is not Status.PASSED:
            # Skipped (it cannot run here) or aborted (a stage before it did not pass): never a pass, never bad.
            return Outcome(Verdict.ERROR, name, why=f"{name} {stage.status.value}: {stage.reason or 'no reason'}")
    return Outcome(Verdict.PASS, stages[-1] if stages else BUILD, why="every stage up to it passed")
