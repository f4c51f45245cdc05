"""`nox -s build`: load → select → lock check → build → verify → tag → report → exit code.

Each step is a small function. A failed cell is a result, not a crash: the run goes on to the
next cell unless --fail-fast. Results are saved after every cell, so an interrupted run keeps
what it finished; good tags are only applied after a cell's verification passed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from . import base as base_images
from . import build, gpus, hostrun, lock, log, matrix, report, results, tags, verify
from .config import Profile
from .errors import ConfigError, LockError, RunFailed, TagError
from .matrix import Cell, Matrix
from .results import BuildResult, CellResult, RunResults, StageResult, Status, Verdict

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Options:
    matrix: Path
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    fail_fast: bool = False
    verify: bool = True
    stages: list[str] | None = None
    profile: str = "default"
    runs: Path = ROOT / "runs"
    run_id: str = ""
    gpu: int = 0
    per_gpu: bool = False
    discovery: gpus.Discovery = field(default_factory=gpus.Discovery)
    container_options: dict[str, Any] = field(default_factory=dict)


def parse(argv: Sequence[str]) -> Options:
    ap = argparse.ArgumentParser(prog="nox -s build --", description="Build and verify the selected cells.")
    ap.add_argument("--matrix", type=Path, default=ROOT / "matrix.yaml")
    ap.add_argument("--only", action="append", default=[], metavar="GLOB", help="cell ids to build (repeatable)")
    ap.add_argument("--skip", action="append", default=[], metavar="GLOB", help="cell ids to leave out")
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first unexpected outcome")
    ap.add_argument("--no-verify", dest="verify", action="store_false", help="build only")
    ap.add_argument("--stages", help="comma-separated verification stages (default: all)")
    ap.add_argument("--profile", default="default", help="server profile from matrix.yaml")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs", help="where run folders go")
    ap.add_argument("--run-id", default="", help="name of this run's folder (default: time + random)")
    ap.add_argument("--gpu", type=int, default=0, help="index of the GPU the GPU stages run on")
    ap.add_argument("--per-gpu", action="store_true",
                    help="one container per GPU, side by side; a stage passes only if it passed on every GPU")
    a = ap.parse_args(list(argv))
    return Options(matrix=a.matrix, only=a.only, skip=a.skip, fail_fast=a.fail_fast, verify=a.verify,
                   stages=a.stages.split(",") if a.stages else None, profile=a.profile, runs=a.runs, gpu=a.gpu,
                   per_gpu=a.per_gpu,
                   run_id=a.run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])


def main(argv: Sequence[str]) -> int:
    opts = parse(argv)
    spec = matrix.load(opts.matrix, dict(os.environ))
    check_options(spec, opts)
    chosen = matrix.select(spec.cells, opts.only, opts.skip, include_excluded=True)
    if not any(c.excluded is None for c in chosen):
        matrix.select(chosen, opts.only, opts.skip)  # raises SelectionError with the explanation
    run = execute(spec, chosen, opts)
    unexpected = [c for c in run.cells if results.is_unexpected(c.verdict)]
    if unexpected:
        names = ", ".join(f"{c.cell_id} ({c.verdict.value})" for c in unexpected)
        msg = f"{len(unexpected)} cell(s) ended unexpectedly: {names}"
        raise RunFailed(msg, hint=f"logs and results: {opts.runs / opts.run_id}")
    return 0


def check_options(spec: Matrix, opts: Options) -> None:
    """Bad options fail before anything is built, not after the first hour-long cell."""
    unknown = [s for s in opts.stages or () if s not in results.LADDER]
    if unknown:
        msg = f"unknown stage(s) {', '.join(unknown)}"
        raise ConfigError(msg, hint="stages are: " + ", ".join(results.LADDER))
    if opts.profile not in spec.spec.profiles:
        msg = f"no server profile {opts.profile!r} in {opts.matrix}"
        raise ConfigError(msg, hint="profiles there: " + ", ".join(spec.spec.profiles))


def execute(spec: Matrix, cells: Sequence[Cell], opts: Options) -> RunResults:
    run_dir = opts.runs / opts.run_id
    run = RunResults(run_id=opts.run_id, started=results.now(), matrix=str(opts.matrix))
    statuses = check_locks(spec, cells)
    buildable = [c for c in cells if c.excluded is None and statuses[c.id].state == "ok"]
    client, engine = build.check_engine()
    build.check_disk(engine, len(buildable))
    found = opts.discovery = gpus.discover(client.info())
    opts.container_options = gpus.container_options(found, gpu=opts.gpu if found.usable_in_containers else None)
    log.info(f"run {opts.run_id}: {len(buildable)} cell(s) to build, engine {engine.version}; {found.summary()}")
    bases = {name: base_images.ensure(name, spec.spec.bases[name], client=client, logs=run_dir)
             for name in sorted({c.base_name for c in buildable})}
    try:
        for cell in cells:
            record = run_cell(cell, spec, statuses[cell.id], bases, client, opts, run_dir)
            run.cells.append(record)
            results.save(run, run_dir / "results.json")
            if opts.fail_fast and results.is_unexpected(record.verdict):
                log.warn("--fail-fast: stopping after the first unexpected outcome")
                break
    finally:
        run.finished = results.now()
        results.save(run, run_dir / "results.json")
        report.console.summary(run)
        report.render_all(run, run_dir / "report")
    return run


def check_locks(spec: Matrix, cells: Sequence[Cell]) -> dict[str, lock.LockStatus]:
    """Every selected cell's lock must be current: a stale lock is an error before anything builds."""
    statuses = {c.id: lock.status_of(spec, c, ROOT) for c in cells}
    stale = [f"{cid} ({s.state}{': ' + s.reason if s.reason else ''})" for cid, s in statuses.items()
             if s.state in ("missing", "stale") and next(c for c in cells if c.id == cid).excluded is None]
    if stale:
        msg = "lockfiles are not current for: " + "; ".join(stale)
        raise LockError(msg, hint="run `nox -s lock` (and commit lockfiles/)")
    return statuses


def run_cell(
    cell: Cell, spec: Matrix, status: lock.LockStatus, bases: dict[str, base_images.BaseImage],
    client: docker.DockerClient, opts: Options, run_dir: Path,
) -> CellResult:
    record = CellResult(cell_id=cell.id, axes=cell.axes(), versions=dict(status.versions), run_id=opts.run_id,
                        expected=_expected(cell))
    if cell.excluded or status.state != "ok":
        record.excluded = cell.excluded or f"{status.state}: {status.reason}"
        return _finish(record)
    base = bases[cell.base_name]
    locks = lock.paths_for(cell, ROOT)
    record.locks = {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in (locks.lane, locks.sglang, locks.toolkit) if p is not None}
    inputs = build.inputs_hash(cell, base, locks)
    tag = tags.candidate_tag(cell, inputs, spec.spec.tags)
    build_log = run_dir / cell.id / "build.log"
    with log.group(f"build {cell.id}"), log.working(f"building {cell.id} (log: {build_log})"):
        record.build, record.image = build.build_cell(
            cell, base, locks, tag=tag, inputs=inputs, client=client, log_file=build_log, env=dict(os.environ))
    log.step(cell.id, "build", record.build.status.value, record.build.duration_s,
             "cached" if record.build.cached else (record.build.reason or ""))
    if record.build.status is Status.PASSED and opts.verify:
        profile = spec.spec.profiles[opts.profile]
        image = record.image.id or tag
        with log.working(f"verifying {cell.id} (log: {run_dir / cell.id / 'probe.log'})"):
            record.stages = _verify(image, cell, profile, opts, run_dir / cell.id)
        for stage in record.stages:
            log.step(cell.id, stage.name, stage.status.value, stage.duration_s,
                     stage.failure_class or stage.reason or "")
        record.versions.update(hostrun.versions_from(record.stages))
    record = _finish(record)
    if record.verdict is Verdict.VERIFIED:
        try:
            record.tags = tags.apply_good_tags(client, record, spec.spec.tags)
        except (docker.errors.APIError, docker.errors.BuildError) as exc:
            msg = f"{cell.id}: verified, but the engine refused its good tags: {exc}"
            raise TagError(msg, hint="the candidate image stays; re-run `nox -s build` for this cell") from None
    return record


def _verify(image: str, cell: Cell, profile: Profile, opts: Options, logs: Path) -> list[StageResult]:
    """The ladder in one container, or (--per-gpu) in one container per GPU, combined."""
    if opts.per_gpu and opts.discovery.usable_in_containers:
        return gpus.combine_per_gpu(gpus.verify_cell_per_gpu(
            image, cell, opts.discovery, logs=logs, run_id=opts.run_id, profile=profile, stages=opts.stages))
    return verify.verify_cell(image, cell, logs=logs, stages=opts.stages, profile=profile, run_id=opts.run_id,
                              container_options=opts.container_options)


def _expected(cell: Cell) -> dict[str, str] | None:
    exp = cell.expected
    if exp is None:
        return None
    return {"stage": ",".join(exp.stages), "class": exp.failure_class or "", "reason": exp.reason}


def _finish(record: CellResult) -> CellResult:
    record.verdict, record.verdict_reason = results.judge(record)
    record.finished = results.now()
    if record.build is None and not record.excluded:
        record.build = BuildResult(status=Status.SKIPPED, reason="not built")
    return record
