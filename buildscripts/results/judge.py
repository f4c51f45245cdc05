"""Verdicts: the one place a cell's verdict is made, from its build and stage results.

A merged record may hold the GPU stages of several GPU archs (one runner on sm_100, another on
sm_120): each arch is judged on its own (`arch_outcomes`), the cell is verified on every arch where
all GPU stages passed (`verified_archs`), and a failure on any arch still makes the cell's verdict
`failed` (or `expected-failure`), its reason naming both: "failed at server on sm_120: …; verified
on sm_100". Good tags follow the arch: one per verified arch, the arch-less ones only for `verified`.
"""

from __future__ import annotations

from .archs import families, family
from .decisive import EVIDENCE_KEY, decisive_line
from .record import CPU_STAGES, GPU_STAGES, REQUIRED_GPU_STAGES, CellResult, StageResult, Status, Verdict

# The version of the judging rules. A record counts for its cell while the cell's definition (which holds this
# number: matrix/definition.py) is unchanged: raise it when a change here would judge a record differently.
RULES = 1
UNCLASSIFIED = "unclassified"
ARCH_VERIFIED = "verified"        # every GPU stage passed there, on a target arch
ARCH_FAILED = "failed"            # a GPU stage failed there
ARCH_INCOMPLETE = "incomplete"    # some GPU stage there was skipped, aborted or is missing
ARCH_OFF_TARGET = "not a target"  # every GPU stage passed, on an arch the image was not built for


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
        on = f" on {family(failed.arch)}" if failed.name in GPU_STAGES and failed.arch else ""
        verified = verified_archs(cell)
        also = f"; verified on {', '.join(verified)}" if verified else ""
        if expected and failed.name in expected.stages and (
            not expected.failure_class or expected.failure_class == failed.failure_class
        ):
            return (Verdict.EXPECTED_FAILURE,
                    f"{failed.name}{on}: {failed.failure_class} (expected: {expected.reason}){also}")
        detail = failure_detail(failed)
        if expected:
            detail += f"; expected {','.join(expected.stages)}/{expected.failure_class or ''} instead"
        return Verdict.FAILED, f"failed at {failed.name}{on}: {detail}{also}"
    if expected and any(_passed(cell, s) for s in expected.stages):
        return Verdict.UNEXPECTED_PASS, f"declared to fail at {','.join(expected.stages)}, but it passed"
    not_run = [s for s in CPU_STAGES if not _passed(cell, s)]
    if not_run:  # a CPU stage skipped, not selected, or absent: nothing can be claimed
        return Verdict.BUILT, "stages did not run: " + ", ".join(not_run)
    outcomes = arch_outcomes(cell)
    verified = [arch for arch, outcome in outcomes.items() if outcome == ARCH_VERIFIED]
    if verified:
        gpus = sorted({s.gpu for s in cell.stages if s.name in GPU_STAGES and s.gpu and s.arch
                       and family(s.arch) in verified})
        others = "".join(f"; {arch}: {outcome}" for arch, outcome in outcomes.items() if outcome != ARCH_VERIFIED)
        return Verdict.VERIFIED, f"verified on {', '.join(verified)} ({', '.join(gpus) or 'GPU'}){others}"
    off_target = [arch for arch, outcome in outcomes.items() if outcome == ARCH_OFF_TARGET]
    if off_target:
        return Verdict.CPU_CHECKED, f"GPU stages passed on {', '.join(off_target)}, which is not a target arch"
    why = next((s.reason for s in cell.stages if s.name in GPU_STAGES and s.reason), None)
    return Verdict.CPU_CHECKED, f"every CPU stage passed; {why or 'GPU stages did not run on a GPU'}"


def gpu_runs(cell: CellResult) -> dict[str, list[StageResult]]:
    """The GPU stages that ran on a GPU, by arch family (`sm_90a` and `sm_90` are one), archs sorted."""
    runs: dict[str, list[StageResult]] = {}
    for stage in cell.stages:
        if stage.name in GPU_STAGES and stage.arch:
            runs.setdefault(family(stage.arch), []).append(stage)
    return dict(sorted(runs.items(), key=lambda item: arch_key(item[0])))


def arch_outcomes(cell: CellResult) -> dict[str, str]:
    """Per arch the GPU stages ran on: ARCH_VERIFIED, ARCH_FAILED, ARCH_INCOMPLETE or ARCH_OFF_TARGET."""
    targets = families(cell.targets)
    outcomes = {}
    for arch, stages in gpu_runs(cell).items():
        if any(s.status is Status.FAILED for s in stages):
            outcomes[arch] = ARCH_FAILED
        elif not set(REQUIRED_GPU_STAGES) <= {s.name for s in stages} or any(s.status is not Status.PASSED
                                                                                for s in stages):
            outcomes[arch] = ARCH_INCOMPLETE
        else:
            outcomes[arch] = ARCH_VERIFIED if not targets or arch in targets else ARCH_OFF_TARGET
    return outcomes


def verified_archs(cell: CellResult) -> list[str]:
    """Archs the cell is verified on: the image built, every CPU stage passed, every GPU stage passed there."""
    if cell.excluded or cell.build is None or cell.build.status is not Status.PASSED:
        return []
    if any(not _passed(cell, s) for s in CPU_STAGES):
        return []
    return [arch for arch, outcome in arch_outcomes(cell).items() if outcome == ARCH_VERIFIED]


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
    return cell.model_copy(update={"verdict": verdict, "verdict_reason": reason,
                                   "verified_archs": verified_archs(cell)})


def _passed(cell: CellResult, name: str) -> bool:
    """Some result of that stage passed (a merged record holds a GPU stage once per arch)."""
    return any(s.name == name and s.status is Status.PASSED for s in cell.stages)


def arch_key(arch: str) -> tuple[int, str]:
    """sm_90 before sm_100 before sm_120 (numeric, not string order)."""
    digits = "".join(c for c in arch if c.isdigit())
    return (int(digits) if digits else 0, arch)


def is_unexpected(verdict: Verdict) -> bool:
    """Outcomes that make the run's exit code non-zero."""
    return verdict in (Verdict.FAILED, Verdict.UNEXPECTED_PASS)
