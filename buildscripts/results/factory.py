"""The one way a cell's results record is made: from what happened, judged once, frozen.

The pipeline (a built cell), `verify IMAGE`, `verify --host`, `verify --lxc` and `import-probe` all call
`cell_record`; nothing else constructs a judged CellResult.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .judge import judged
from .record import BuildResult, CarriedRecord, CellResult, ExpectedFailure, ImageInfo, StageResult, Status
from .store import now

VERSION_KEYS = ("torch", "sglang", "flashinfer", "deep_gemm", "cuda_runtime", "driver", "nvcc")


@dataclass(frozen=True, kw_only=True)
class Given:
    """What is known of a cell before its outcome: its axes and targets, the failure it is expected to meet (or why
    it is excluded), and the versions, locks and run it is made with."""

    axes: Mapping[str, str] | None = None
    targets: Sequence[str] = ()
    excluded: str | None = None
    expected: ExpectedFailure | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    locks: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None


def cell_record(cell_id: str, given: Given | None = None, *, build: BuildResult | None = None,
                image: ImageInfo | None = None, stages: Sequence[StageResult] = (),
                verification_key: str | None = None, reused_from: str | None = None,
                notes: Sequence[str] = (), carried: CarriedRecord | None = None) -> CellResult:
    """A judged, frozen CellResult. A cell that is neither excluded nor built is recorded as not built. `carried`:
    the record whose stages among `stages` ran on another runner (verify/carry.py); they are judged as any."""
    given = given or Given()
    if build is None and not given.excluded:
        build = BuildResult(status=Status.SKIPPED, reason="not built")
    record = CellResult(
        cell_id=cell_id, axes=dict(given.axes or {}), targets=list(given.targets), excluded=given.excluded,
        expected=given.expected, build=build, image=image or ImageInfo(), stages=list(stages),
        versions={**given.versions, **versions_from(stages)}, locks=dict(given.locks), run_id=given.run_id,
        finished=now(), verification_key=verification_key, reused_from=reused_from, notes=list(notes) or None,
        carried=carried,
    )
    return judged(record)


def versions_from(stages: Sequence[StageResult]) -> dict[str, str]:
    """Key versions as the stages saw them (torch from gpu-visible, the rest from facts/import if any)."""
    found: dict[str, str] = {}
    for stage in stages:
        for key in VERSION_KEYS:
            value = stage.evidence.get(key)
            if isinstance(value, str | int | float) and key not in found:
                found[key] = str(value)
        versions = stage.evidence.get("versions")
        if isinstance(versions, dict):
            for key, value in versions.items():
                found.setdefault(str(key), str(value))
    return found
