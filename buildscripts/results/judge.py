"""Verdicts: the one place a cell's verdict is made, from its build and stage results."""

from __future__ import annotations

from .archs import families
from .decisive import EVIDENCE_KEY, decisive_line
from .schema import CPU_STAGES, GPU_STAGES, CellResult, StageResult, Status, Verdict

UNCLASSIFIED = "unclassified"


def judge(cell: CellResult) -> tuple[Verdict, str]:
    """The verdict a cell earned from its build and stage results, with the reason."""
    if cell.excluded:
        return Verdict.INCOMPATIBLE, cell.excluded
    if cell.build is None or cell.build.status is not Status.PASSED:
        reason = cell.build.reason if cell.build else "not built"
        if cell.build and cell.build.status is Status.FAILED:
            return Verdict.FAILED, f"build: {reason}"
        return Verdict.SKIPPED, reason or "not built"
    if not cell.stages:
        return Verdict.BUILT, "no verification ran"
    failed = cell.first_failure()
    expected = cell.expected
    if failed is not None:
        if expected and failed.name in expected.stages and (
            not expected.failure_class or expected.failure_class == failed.failure_class
        ):
            return Verdict.EXPECTED_FAILURE, f"{failed.name}: {failed.failure_class} (expected: {expected.reason})"
        detail = failure_detail(failed)
        if expected:
            detail += f"; expected {','.join(expected.stages)}/{expected.failure_class or ''} instead"
        return Verdict.FAILED, f"failed at {failed.name}: {detail}"
    if expected and any(_passed(cell, s) for s in expected.stages):
        return Verdict.UNEXPECTED_PASS, f"declared to fail at {','.join(expected.stages)}, but it passed"
    not_run = [s for s in CPU_STAGES if not _passed(cell, s)]
    if not_run:  # a CPU stage skipped, not selected, or absent: nothing can be claimed
        return Verdict.BUILT, "stages did not run: " + ", ".join(not_run)
    gpu = {s.name: s for s in cell.stages if s.name in GPU_STAGES}
    if set(gpu) != set(GPU_STAGES) or any(s.status is not Status.PASSED or not s.arch for s in gpu.values()):
        why = next((s.reason for s in gpu.values() if s.reason), None) or "GPU stages did not run on a GPU"
        return Verdict.CPU_CHECKED, f"every CPU stage passed; {why}"
    archs = sorted({s.arch for s in gpu.values() if s.arch})
    if cell.targets and not families(archs) & families(cell.targets):
        return Verdict.CPU_CHECKED, f"GPU stages passed on {', '.join(archs)}, which is not a target arch"
    gpus = sorted({s.gpu for s in gpu.values() if s.gpu})
    return Verdict.VERIFIED, f"verified on {', '.join(archs)} ({', '.join(gpus) or 'GPU'})"


def failure_detail(stage: StageResult) -> str:
    """A failed stage's class; an unclassified one with its decisive log line, so no report hides the error."""
    if stage.failure_class and stage.failure_class != UNCLASSIFIED:
        return stage.failure_class
    text = "\n".join(part for part in (stage.reason, stage.log_excerpt) if part)
    line = str(stage.evidence.get(EVIDENCE_KEY) or "") or decisive_line(text)
    return f"{UNCLASSIFIED}: {line}" if line else UNCLASSIFIED


def judged(cell: CellResult) -> CellResult:
    """A copy of `cell` with the verdict `judge` gives it (the only way a verdict is set)."""
    verdict, reason = judge(cell)
    return cell.model_copy(update={"verdict": verdict, "verdict_reason": reason})


def _passed(cell: CellResult, name: str) -> bool:
    stage = cell.stage(name)
    return stage is not None and stage.status is Status.PASSED


def is_unexpected(verdict: Verdict) -> bool:
    """Outcomes that make the run's exit code non-zero."""
    return verdict in (Verdict.FAILED, Verdict.UNEXPECTED_PASS)
