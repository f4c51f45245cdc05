"""The results record of a run (the single source of truth for tags and reports), its verdicts and files.

Bottom of the flow: everything above reads and writes results through this package; it imports
nothing of theirs.
"""

from .archs import families, family, tag_form
from .factory import Given, cell_record, versions_from
from .judge import arch_key, arch_outcomes, gpu_runs, is_unexpected, judge, judged, verified_archs
from .provenance import definition_digest, matrix_digest
from .record import (
    CPU_STAGES,
    GPU_STAGES,
    LADDER,
    REQUIRED_GPU_STAGES,
    SCHEMA_VERSION,
    BuildResult,
    CarriedRecord,
    CellResult,
    ExpectedFailure,
    ImageInfo,
    RunResults,
    StageResult,
    Status,
    Verdict,
)
from .store import load, now, save

__all__ = [
    "CPU_STAGES", "GPU_STAGES", "LADDER", "REQUIRED_GPU_STAGES", "SCHEMA_VERSION", "BuildResult", "CarriedRecord",
    "CellResult", "ExpectedFailure",
    "Given", "ImageInfo", "RunResults", "StageResult", "Status", "Verdict", "arch_key", "arch_outcomes", "cell_record",
    "definition_digest", "families", "family", "gpu_runs", "is_unexpected", "judge", "judged", "load",
    "matrix_digest",
    "now", "save", "tag_form", "verified_archs", "versions_from",
]
