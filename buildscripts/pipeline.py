"""`nox -s build`: load → select → lock check → build → verify → tag → report → exit code.

Each step is a small function. A failed cell is a result, not a crash: the run goes on to the
next cell unless --fail-fast. Results are saved after every cell, so an interrupted run keeps
what it finished; good tags are only applied after a cell's verification passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from . import engine, log, matrix, report, results
from .build import base as base_images
from .build import buildx
from .errors import ConfigError, LockError, RunFailed, TagError
from .lock import LockStatus, paths_for, status_of
from .matrix import Cell, Matrix
from .publish import tags
from .results import CellResult, RunResults, StageResult, Status, Verdict, cell_record
from .verify import gpus
from .verify.container import KEEP_ENV, network_options
from .verify.ladder import verify_image
from .verify.pergpu import combine_per_gpu, verify_per_gpu
from .verify.plan import Plan
from .workspace import Workspace


@dataclass
class Options:
    ws: Workspace
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    fail_fast: bool = False
    verify: bool = True
    stages: list[str] | None = None
    profile: str = "default"
    run_id: str = ""
    gpu: int = 0
    per_gpu: bool = False
    keep_containers: bool = False
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Context:
    """What the run found out before the first cell: the engine client, its GPUs, the base images."""

    client: docker.DockerClient
    discovery: gpus.Discovery
    container_options: dict[str, Any]   # the GPU (one, or none) and the network, for verification containers
    network_options: dict[str, Any]
    bases: dict[str, base_images.BaseImage]
    recipe: buildx.Recipe


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    ap = argparse.ArgumentParser(prog="nox -s build --", description="Build and verify the selected cells.")
    ap.add_argument("--matrix", type=Path, default=ws.matrix)
    ap.add_argument("--only", action="append", default=[], metavar="GLOB", help="cell ids to build (repeatable)")
    ap.add_argument("--skip", action="append", default=[], metavar="GLOB", help="cell ids to leave out")
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first unexpected outcome")
    ap.add_argument("--no-verify", dest="verify", action="store_false", help="build only")
    ap.add_argument("--stages", help="comma-separated verification stages (default: all)")
    ap.add_argument("--profile", default="default", help="server profile from matrix.yaml")
    ap.add_argument("--runs", type=Path, default=ws.runs, help="where run folders go")
    ap.add_argument("--run-id", default="", help="name of this run's folder (default: time + random)")
    ap.add_argument("--gpu", type=int, default=0, help="index of the GPU the GPU stages run on")
    ap.add_argument("--per-gpu", action="store_true",
                    help="one container per GPU, side by side; a stage passes only if it passed on every GPU")
    a = ap.parse_args(list(argv))
    return Options(ws=dataclasses.replace(ws, matrix=a.matrix, runs=a.runs), only=a.only, skip=a.skip,
                   fail_fast=a.fail_fast, verify=a.verify, stages=a.stages.split(",") if a.stages else None,
                   profile=a.profile, gpu=a.gpu, per_gpu=a.per_gpu, keep_containers=env.get(KEEP_ENV) == "1",
                   env=env, run_id=a.run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    env = env or {}
    opts = parse(argv, ws or Workspace.at(), env)
    spec = matrix.load(opts.ws.matrix, dict(env))
    check_options(spec, opts)
    chosen = matrix.select(spec.cells, opts.only, opts.skip, include_excluded=True)
    if not any(c.excluded is None for c in chosen):
        matrix.select(chosen, opts.only, opts.skip)  # raises SelectionError with the explanation
    run = execute(spec, chosen, opts)
    unexpected = [c for c in run.cells if results.is_unexpected(c.verdict)]
    if unexpected:
        names = ", ".join(f"{c.cell_id} ({c.verdict.value})" for c in unexpected)
        msg = f"{len(unexpected)} cell(s) ended unexpectedly: {names}"
        raise RunFailed(msg, hint=f"logs and results: {opts.ws.run_dir(opts.run_id)}")
    return 0


def check_options(spec: Matrix, opts: Options) -> None:
    """Bad options fail before anything is built, not after the first hour-long cell."""
    unknown = [s for s in opts.stages or () if s not in results.LADDER]
    if unknown:
        msg = f"unknown stage(s) {', '.join(unknown)}"
        raise ConfigError(msg, hint="stages are: " + ", ".join(results.LADDER))
    if opts.profile not in spec.spec.profiles:
        msg = f"no server profile {opts.profile!r} in {opts.ws.matrix}"
        raise ConfigError(msg, hint="profiles there: " + ", ".join(spec.spec.profiles))


def execute(spec: Matrix, cells: Sequence[Cell], opts: Options) -> RunResults:
    run_dir = opts.ws.run_dir(opts.run_id)
    run = RunResults(run_id=opts.run_id, started=results.now(), matrix=str(opts.ws.matrix))
    statuses = check_locks(spec, cells, opts.ws)
    buildable = [c for c in cells if c.excluded is None and statuses[c.id].state == "ok"]
    client = engine.connect()
    found = engine.check(client)
    engine.check_disk(found, len(buildable))
    ctx = prepare(client, spec, buildable, opts, run_dir)
    log.info(f"run {opts.run_id}: {len(buildable)} cell(s) to build, engine {found.version}; "
             f"{ctx.discovery.summary()}")
    for warning in ctx.discovery.warnings:
        log.warn(warning)
    results.save(run, run_dir / "results.json")  # a run killed in its first cell still leaves a record
    try:
        for cell in cells:
            record = run_cell(cell, spec, statuses[cell.id], ctx, opts, run_dir)
            run.cells.append(record)
            results.save(run, run_dir / "results.json")
            if opts.fail_fast and results.is_unexpected(record.verdict):
                log.warn("--fail-fast: stopping after the first unexpected outcome")
                break
    finally:
        run.finished = results.now()
        results.save(run, run_dir / "results.json")
        report.console.summary(run)
        report.render_all(run, run_dir / "report", opts.env)
    return run


def prepare(client: docker.DockerClient, spec: Matrix, buildable: Sequence[Cell], opts: Options,
            run_dir: Path) -> Context:
    discovery = gpus.discover(client.info())
    network = network_options(client)
    options = {**gpus.container_options(discovery, gpu=opts.gpu if discovery.usable_in_containers else None),
               **network}
    bases = {name: base_images.ensure(name, spec.spec.bases[name], client=client, logs=run_dir,
                                      labels=base_images.owner_labels(opts.env))
             for name in sorted({c.base_name for c in buildable})}
    return Context(client, discovery, options, network, bases, buildx.Recipe.of(opts.ws))


def check_locks(spec: Matrix, cells: Sequence[Cell], ws: Workspace) -> dict[str, LockStatus]:
    """Every selected cell's lock must be current: a stale lock is an error before anything builds."""
    statuses = {c.id: status_of(spec, c, ws.locks) for c in cells}
    stale = [f"{cid} ({s.state}{': ' + s.reason if s.reason else ''})" for cid, s in statuses.items()
             if s.state in ("missing", "stale") and next(c for c in cells if c.id == cid).excluded is None]
    if stale:
        msg = "lockfiles are not current for: " + "; ".join(stale)
        raise LockError(msg, hint="run `nox -s lock` (and commit lockfiles/)")
    return statuses


def run_cell(cell: Cell, spec: Matrix, status: LockStatus, ctx: Context, opts: Options, run_dir: Path) -> CellResult:
    facts: dict[str, Any] = {"axes": cell.axes(), "targets": cell.archs, "expected": cell.expected_failure(),
                             "versions": status.versions, "run_id": opts.run_id}
    if cell.excluded or status.state != "ok":
        return cell_record(cell.id, excluded=cell.excluded or f"{status.state}: {status.reason}", **facts)
    base = ctx.bases[cell.base_name]
    locks = paths_for(cell, opts.ws.locks)
    facts["locks"] = {opts.ws.shown(p): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in (locks.lane, locks.sglang, locks.toolkit) if p is not None}
    inputs = buildx.inputs_hash(cell, base, locks, ctx.recipe)
    tag = tags.candidate_tag(cell, inputs, spec.spec.tags)
    build_log = run_dir / cell.id / "build.log"
    with log.group(f"build {cell.id}"), log.working(f"building {cell.id} (log: {build_log})"):
        build, image = buildx.build_cell(cell, base, locks, ctx.recipe, tag=tag, inputs=inputs, client=ctx.client,
                                         log_file=build_log, env=opts.env)
    log.step(cell.id, "build", build.status.value, build.duration_s,
             "cached" if build.cached else (build.reason or ""))
    stages: list[StageResult] = []
    if build.status is Status.PASSED and opts.verify:
        plan = Plan.for_cell(cell, stages=opts.stages, profile=spec.spec.profiles[opts.profile])
        with log.working(f"verifying {cell.id} (log: {run_dir / cell.id / 'probe.log'})"):
            stages = _verify(image.id or tag, cell, plan, ctx, opts, run_dir / cell.id)
        for stage in stages:
            log.step(cell.id, stage.name, stage.status.value, stage.duration_s,
                     stage.failure_class or stage.reason or "")
    record = cell_record(cell.id, build=build, image=image, stages=stages, **facts)
    if record.verdict is Verdict.VERIFIED:
        try:
            record = record.model_copy(update={"tags": tags.apply_good_tags(ctx.client, record, spec.spec.tags)})
        except (docker.errors.APIError, docker.errors.BuildError) as exc:
            msg = f"{cell.id}: verified, but the engine refused its good tags: {exc}"
            raise TagError(msg, hint="the candidate image stays; re-run `nox -s build` for this cell") from None
    return record


def _verify(image: str, cell: Cell, plan: Plan, ctx: Context, opts: Options, logs: Path) -> list[StageResult]:
    """The ladder in one container, or (--per-gpu) in one container per GPU, combined."""
    if opts.per_gpu and ctx.discovery.usable_in_containers:
        return combine_per_gpu(verify_per_gpu(ctx.client, image, plan, ctx.discovery, logs=logs,
                                              run_id=opts.run_id, cell_id=cell.id, keep=opts.keep_containers,
                                              extra_options=ctx.network_options))
    return verify_image(ctx.client, image, plan, log_file=logs / "probe.log", run_id=opts.run_id, cell_id=cell.id,
                        options=ctx.container_options, keep=opts.keep_containers)
