"""The results record of a run: the single source of truth for tags and reports.

Schema (documented in docs/results-schema.md): a RunResults holds one CellResult per cell; a
CellResult holds the build outcome and one StageResult per verification stage. Verdicts are
derived from stage results here, in one place, never set by hand elsewhere.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ResultsError
from .probe.core import ORDER

SCHEMA_VERSION = 1


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


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class ImageInfo(Record):
    ref: str | None = None          # candidate tag
    id: str | None = None           # image id (sha256:...)
    digest: str | None = None       # registry digest once pushed
    size_bytes: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class BuildResult(Record):
    status: Status
    duration_s: float = 0.0
    reason: str | None = None
    cached: bool = False            # nothing rebuilt: every layer came from the cache
    log: str | None = None          # path of the build log, relative to the run folder
    layers: dict[str, float] = Field(default_factory=dict)  # stage name -> seconds (0 when cached)


class CellResult(Record):
    cell_id: str
    axes: dict[str, str] = Field(default_factory=dict)
    excluded: str | None = None
    expected: dict[str, str] | None = None     # {"stage", "class", "reason"} when declared xfail
    build: BuildResult | None = None
    image: ImageInfo = Field(default_factory=ImageInfo)
    stages: list[StageResult] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)  # key resolved versions (torch, sglang, ...)
    verdict: Verdict = Verdict.SKIPPED
    verdict_reason: str | None = None
    tags: list[str] = Field(default_factory=list)           # good tags earned in this run
    locks: dict[str, str] = Field(default_factory=dict)     # lockfile path -> sha256 (good-tag labels)
    promoted: dict[str, str] = Field(default_factory=dict)  # registry ref -> manifest digest, all pushed
    run_id: str | None = None                                # provenance after merging
    runner: str | None = None
    finished: str | None = None

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)

    def first_failure(self) -> StageResult | None:
        return next((s for s in self.stages if s.status is Status.FAILED), None)


class RunResults(Record):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    started: str
    finished: str | None = None
    runner: str = Field(default_factory=socket.gethostname)
    host: dict[str, str] = Field(default_factory=lambda: {"platform": " ".join(os.uname()[0:3:2])})
    matrix: str | None = None
    cells: list[CellResult] = Field(default_factory=list)

    def cell(self, cell_id: str) -> CellResult | None:
        return next((c for c in self.cells if c.cell_id == cell_id), None)


LADDER = ORDER  # every verification stage, in order (the probe defines them)
GPU_STAGES = ("gpu-visible", "kernel-smoke", "server", "first-generation")
CPU_STAGES = tuple(s for s in LADDER if s not in GPU_STAGES)


def judge(cell: CellResult) -> tuple[Verdict, str]:
    """The verdict a cell earned from its build and stage results (the one place verdicts are made)."""
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
    expected_stages = (expected or {}).get("stage", "").split(",")
    if failed is not None:
        if expected and failed.name in expected_stages and (
            not expected.get("class") or expected["class"] == failed.failure_class
        ):
            return Verdict.EXPECTED_FAILURE, f"{failed.name}: {failed.failure_class} (expected: {expected['reason']})"
        detail = failed.failure_class or "unclassified"
        if expected:
            detail += f"; expected {expected.get('stage')}/{expected.get('class')} instead"
        return Verdict.FAILED, f"failed at {failed.name}: {detail}"
    if expected and any(_passed(cell, s) for s in expected_stages):
        return Verdict.UNEXPECTED_PASS, f"declared to fail at {expected.get('stage')}, but it passed"
    not_run = [s for s in CPU_STAGES if not _passed(cell, s)]
    if not_run:  # a CPU stage skipped, not selected, or absent: nothing can be claimed
        return Verdict.BUILT, "stages did not run: " + ", ".join(not_run)
    gpu = {s.name: s for s in cell.stages if s.name in GPU_STAGES}
    if set(gpu) != set(GPU_STAGES) or any(s.status is not Status.PASSED or not s.arch for s in gpu.values()):
        why = next((s.reason for s in gpu.values() if s.reason), None) or "GPU stages did not run on a GPU"
        return Verdict.CPU_CHECKED, f"every CPU stage passed; {why}"
    archs = sorted({s.arch for s in gpu.values() if s.arch})
    targets = {t.rstrip("af") for t in cell.axes.get("archs", "").split()}
    if targets and not set(archs) & targets:
        return Verdict.CPU_CHECKED, f"GPU stages passed on {', '.join(archs)}, which is not a target arch"
    gpus = sorted({s.gpu for s in gpu.values() if s.gpu})
    return Verdict.VERIFIED, f"verified on {', '.join(archs)} ({', '.join(gpus) or 'GPU'})"


def _passed(cell: CellResult, name: str) -> bool:
    stage = cell.stage(name)
    return stage is not None and stage.status is Status.PASSED


def is_unexpected(verdict: Verdict) -> bool:
    """Outcomes that make the run's exit code non-zero."""
    return verdict in (Verdict.FAILED, Verdict.UNEXPECTED_PASS)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def save(results: RunResults, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(results.model_dump_json(indent=2) + "\n")
    tmp.replace(path)  # atomic: an interrupted run never leaves half a results file


def load(path: Path) -> RunResults:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        msg = f"cannot read results file {path}: {exc}"
        raise ResultsError(msg, hint="re-run `nox -s build` or delete the file") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        msg = f"{path}: results schema {version!r} is not supported (this version reads {SCHEMA_VERSION})"
        raise ResultsError(msg, hint="re-run the verification with this version to regenerate it")
    try:
        return RunResults.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = f"{path}: corrupted results ({where}: {first['msg']})"
        raise ResultsError(msg, hint="re-run the verification to regenerate it") from None
