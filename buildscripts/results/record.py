"""The shape of the results record: the single source of truth for tags and reports.

Schema (documented in docs/results-schema.md): a RunResults holds one CellResult per cell; a
CellResult holds the build outcome and one StageResult per verification stage. Every record but
the run itself is frozen: a cell's verdict is made once, by `judge`, when `factory` builds it, and
later steps (tagging, promotion, merging) make new records with `model_copy` instead of editing.
"""

from __future__ import annotations

import os
import socket
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..probe.core import ORDER

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)  # schema 1 is read and upgraded: `expected.stage` became a list, `targets` was added
LADDER = tuple(ORDER)  # every verification stage, in order (the probe defines them)
GPU_STAGES = ("gpu-visible", "kernel-smoke", "nccl-allreduce", "server", "first-generation")
# GPU stages an arch is verified without when a record lacks them (records made before they existed); when
# present, they must pass like every other.
LATER_GPU_STAGES = ("nccl-allreduce",)
REQUIRED_GPU_STAGES = tuple(s for s in GPU_STAGES if s not in LATER_GPU_STAGES)   # every record has these
CPU_STAGES = tuple(s for s in LADDER if s not in GPU_STAGES)
# A cell holds one result per stage, one per GPU arch for a merged record: the ladder's ten stages on the
# fourteen known archs come to 140. A file with far more is not a record of runs (and would cost every
# renderer time that grows with it).
MAX_STAGES_PER_CELL = 1000


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"   # could not run here (e.g. needs a GPU); never counts as passed
    ABORTED = "aborted"   # a prerequisite failed, so it was not run


class Verdict(StrEnum):
    VERIFIED = "verified"          # every stage passed, GPU stages included, on a GPU of a target arch
    CPU_CHECKED = "cpu-checked"    # every stage that can run without a GPU passed; GPU stages skipped
    BUILT = "built"                # image built, not verified
    FAILED = "failed"              # an unexpected failure at some stage
    EXPECTED_FAILURE = "expected-failure"
    UNEXPECTED_PASS = "unexpected-pass"  # declared as expected to fail, but did not: flagged loudly
    INCOMPATIBLE = "incompatible"  # excluded by a rule or refused by the lock (drift)
    SKIPPED = "skipped"


# No NaN or infinity anywhere: JSON cannot hold them (pydantic would write them back as null, and the file
# could not be read again as what it was).
class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class StageResult(Record):
    name: str
    status: Status
    duration_s: float = 0.0
    reason: str | None = None                 # why skipped/aborted/failed, one line
    evidence: dict[str, Any] = Field(default_factory=dict)
    failure_class: str | None = None
    hint: str | None = None
    log_excerpt: str | None = None
    where: str = "container (cpu)"           # e.g. "container (cpu)", "host: NVIDIA H200 (sm_90)"
    gpu: str | None = None                    # GPU name when it ran on one
    arch: str | None = None                   # sm_XX of that GPU
    run_id: str | None = None                 # provenance, filled when results of several runs merge
    runner: str | None = None
    finished: str | None = None
    image_id: str | None = None               # the image it ran in, when that may differ from its cell's
    # The keyid (trust/keys.py) of the key that sealed the record this entry was made in: this record's verifier
    # for a stage run here, the build runner's for a stage carried from its record (verify --cpu-record).
    sealed_by: str | None = None
    # For a stage this record carries, not runs: "carried from the record of run R (cell C, digest D) sealed by
    # KEYID" (verify/carry.py); the carried record's envelope is the cell's `carried`.
    carried_from: str | None = None


class ImageInfo(Record):
    ref: str | None = None          # candidate tag (or, verified by digest, the `REPO@sha256:…` pulled)
    id: str | None = None           # image id (sha256:...) in the engine that ran it
    digest: str | None = None       # manifest digest in a registry: the subject of its verdicts
    # The registry repository `digest` was read back from (staged by `build --stage`, or pulled by
    # `verify REPO@sha256:…`); with it, `subject` names the tested image wherever it is copied.
    repository: str | None = None
    platform_digest: str | None = None  # when `digest` is an index: the manifest of the platform that ran
    size_bytes: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    layers: dict[str, int] = Field(default_factory=dict)  # bytes per Dockerfile stage, largest first

    @property
    def subject(self) -> str | None:
        """`REPO@sha256:…` of the tested image in a registry, when it was staged there or pulled from it."""
        return f"{self.repository}@{self.digest}" if self.repository and self.digest else None


class BuildResult(Record):
    status: Status
    duration_s: float = 0.0
    reason: str | None = None
    cached: bool = False            # nothing rebuilt: every layer came from the cache
    log: str | None = None          # path of the build log, relative to the run folder
    layers: dict[str, float] = Field(default_factory=dict)  # stage name -> seconds (0 when cached)


class ExpectedFailure(Record):
    """A cell declared to fail (matrix.yaml `expect:`), like pytest's xfail."""

    stages: list[str] = Field(min_length=1)   # it fails at one of these stages
    failure_class: str | None = None           # and, when given, with this class
    reason: str

    @model_validator(mode="before")
    @classmethod
    def _from_older_files(cls, data: Any) -> Any:
        """Results written before this field was typed: {"stage": "a,b", "class": "" | ID, "reason"}."""
        if isinstance(data, dict) and "stage" in data and "stages" not in data:
            data = dict(data)
            data["stages"] = [s for s in str(data.pop("stage")).split(",") if s]
            data["failure_class"] = data.pop("class", None) or None
        return data


class CarriedRecord(Record):
    """The build runner's sealed record whose CPU stages a GPU runner's record carries instead of running them
    again (verify --cpu-record, verify/carry.py): enough to check them again without the file it came from."""

    cell_id: str
    run_id: str | None = None
    runner: str | None = None       # the host name its results file gives (the file's word, outside that seal)
    digest: str                     # the platform manifest digest that record and this one judged
    keyid: str                      # the key that sealed it, trusted by the verifier that carried it
    key: str                        # that key's name where the verifier found it (e.g. keys/ci.pub)
    stages: list[str]               # the stages carried, in ladder order
    seal: dict[str, Any]            # its DSSE envelope: the payload is that whole record as it was sealed


class CellResult(Record):
    cell_id: str
    axes: dict[str, str] = Field(default_factory=dict)      # the cell's coordinates (tag template fields)
    targets: list[str] = Field(default_factory=list)        # target archs, e.g. ["sm_90a", "sm_100a"]
    excluded: str | None = None
    expected: ExpectedFailure | None = None
    build: BuildResult | None = None
    image: ImageInfo = Field(default_factory=ImageInfo)
    stages: list[StageResult] = Field(default_factory=list, max_length=MAX_STAGES_PER_CELL)
    versions: dict[str, str] = Field(default_factory=dict)  # key resolved versions (torch, sglang, ...)
    verdict: Verdict = Verdict.SKIPPED
    verdict_reason: str | None = None
    verified_archs: list[str] = Field(default_factory=list)  # GPU families every GPU stage passed on (judge)
    tags: list[str] = Field(default_factory=list)           # good tags earned in this run
    locks: dict[str, str] = Field(default_factory=dict)     # lockfile path -> sha256 (good-tag labels)
    promoted: dict[str, str] = Field(default_factory=dict)  # registry ref -> manifest digest, all pushed
    run_id: str | None = None                                # provenance after merging
    runner: str | None = None
    finished: str | None = None
    verification_key: str | None = None      # hash of every input of the verification (verify/reuse.py)
    reused_from: str | None = None           # "run ID of TIME on RUNNER" when its stages were reused
    # What the host noted about the run that decides no verdict (judge never reads it): what the clean-up after
    # a host run did and could not do, why the record is not sealed. None when there is nothing to say.
    notes: list[str] | None = None
    # The run's matrix digest, copied in before the seal (the run's own field is outside every seal): provenance,
    # which matrix.yaml the record was judged with; what it counts for is its cell's definition, below.
    matrix_digest: str | None = None
    # What matrix.yaml said about this cell when it was judged (matrix/definition.py), and its digest, copied in
    # before the seal: the record counts for its cell while the cell's definition is unchanged (gate.py); None
    # in records made before (judged by the whole file's digest) and in runs that are no cell of matrix.yaml.
    definition: dict[str, Any] | None = None
    definition_digest: str | None = None
    # The build runner's record whose CPU stages this one carries (verify --cpu-record); None when every stage ran
    # in this verification.
    carried: CarriedRecord | None = None
    # A DSSE envelope over the rest of the record by the verifier that made it (trust/seal.py): what
    # tag, promote, export and the reuse lookup check before they act on the record.
    seal: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _targets_from_axes(cls, data: Any) -> Any:
        """Results written before `targets` existed kept the archs only as the `archs` axis."""
        if isinstance(data, dict) and "targets" not in data:
            archs = (data.get("axes") or {}).get("archs", "")
            if archs:
                data = {**data, "targets": str(archs).split()}
        return data

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)

    def first_failure(self) -> StageResult | None:
        return next((s for s in self.stages if s.status is Status.FAILED), None)


class RunResults(BaseModel):
    """One run: it grows a cell at a time (and is saved after each), so it alone is not frozen."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _upgraded(cls, data: Any) -> Any:
        """A schema-1 file is read as schema 2 (its cells are upgraded by their own validators)."""
        if isinstance(data, dict) and data.get("schema_version") == 1:
            data = {**data, "schema_version": SCHEMA_VERSION}
        return data

    schema_version: int = SCHEMA_VERSION
    run_id: str
    started: str
    finished: str | None = None
    runner: str = Field(default_factory=socket.gethostname)
    host: dict[str, str] = Field(default_factory=lambda: {"platform": " ".join(os.uname()[0:3:2])})
    matrix: str | None = None
    # sha256 of the normalised matrix.yaml the run was made from (results.matrix_digest); None in files
    # written before it was recorded: read as "unknown matrix", with a warning where it matters.
    matrix_digest: str | None = None
    cells: list[CellResult] = Field(default_factory=list)

    def cell(self, cell_id: str) -> CellResult | None:
        return next((c for c in self.cells if c.cell_id == cell_id), None)
