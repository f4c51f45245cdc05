"""`nox -s build` (commands/build.py): lock check → build → verify → tag (or stage) → report, over the cells chosen.

Each step is a small function. A failed cell is a result, not a crash: the run goes on to the
next cell unless --fail-fast. Results are saved after every cell, so an interrupted run keeps
what it finished; good tags are only applied after a cell's verification passed. With `--stage
REPO` the run builds once for GPU jobs elsewhere: CPU stages only, and what passed them is pushed to
REPO with its digest read back into the results (publish/staging.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from . import engine, log, report, results
from .attest import describe
from .attest.provenance import LOCAL_BUILDER, BuildFacts
from .attest.sbom import Subject
from .build import base as base_images
from .build import buildx, cache, footprint, native
from .errors import ConfigError, FatalError, LockError
from .lock import LockStatus, paths_for, status_of
from .matrix import Cell, Matrix
from .matrix.schema import LABEL_PREFIX, Cache
from .pipeline_options import BuildOptions
from .publish import staging, tags, trusted
from .results import BuildResult, CellResult, Given, ImageInfo, RunResults, StageResult, Status, cell_record
from .trust import keys, seal, verdicts
from .trust.keys import PublicKey, SigningKey
from .verify import provision, reuse, tp
from .verify.one_image import verify_image
from .verify.per_gpu_containers import combine_per_gpu, verify_per_gpu
from .verify.request import Provision, VerificationRequest
from .workspace import Workspace

if TYPE_CHECKING:
    import docker


@dataclass(frozen=True, kw_only=True)
class Context:
    """What the run found out before the first cell: the engine client, what it gives every verification
    container (its GPUs, their options, the network), the base images, the saved runs, the keys."""

    client: docker.DockerClient
    provision: Provision                # the GPUs (one, every one or none) and the network of verifications
    bases: dict[str, base_images.BaseImage]
    recipe: buildx.Recipe
    history: list[RunResults]           # saved runs, newest first: verifications that may be reused
    builder: cache.Builder
    cache: cache.CachePlan | None
    key: SigningKey                     # seals every record this run judges (trust/seal.py)
    trusted: list[PublicKey]            # whose seals count: for reused records and the tag step
    # cell id -> (inputs hash, candidate tag) of every buildable cell, hashed once per run (`candidate`)
    candidates: dict[str, tuple[str, str]] = field(default_factory=dict)
    # base of another platform's cells -> the build machine's base their wheels are installed on (build/native.py)
    natives: dict[str, str] = field(default_factory=dict)

    def native_of(self, cell: Cell) -> base_images.BaseImage | None:
        name = self.natives.get(cell.base_name)
        return self.bases[name] if name else None


def execute(matrix: Matrix, cells: Sequence[Cell], opts: BuildOptions) -> RunResults:
    run_dir = opts.ws.run_dir(opts.run_id)
    run = RunResults(run_id=opts.run_id, started=results.now(), matrix=str(opts.ws.matrix),
                     matrix_digest=results.matrix_digest(matrix.spec))
    statuses = check_locks(matrix, cells, opts.ws)
    buildable = [c for c in cells if c.excluded is None and statuses[c.id].state == "ok"]
    client = engine.connect()
    found = engine.check(client)
    if opts.stage:
        staging.check(opts.stage, opts.env)   # before an hour of building, not after
    ctx = prepare(client, matrix, buildable, opts, run_dir)
    current = ctx.candidates
    missing = [c for c in buildable if not _image_exists(client, current[c.id][1])]
    tag_of = partial(_candidate_of, {c.id: c for c in buildable}, matrix)
    local = engine.local_root(found, opts.env)
    if missing:   # room before the check: what the cache holds that no image does is the first thing to go
        footprint.make_room(local, opts.cache_keep, ctx.builder.name, ctx.builder.driver)
    engine.check_disk(found, len(missing),  # only what will really be built needs room
                      advice=lambda: footprint.advice(client, opts.ws.runs, {k: v[0] for k, v in current.items()},
                                                      tag_of))
    provision.say(ctx.provision.discovery, f"run {opts.run_id}: {len(buildable)} cell(s), {len(missing)} to "
                                           f"build, engine {found.version}; ")
    results.save(run, run_dir / "results.json")  # a run killed in its first cell still leaves a record
    try:
        later = {c.id for c in missing[1:]}   # the first cell to build had its room made before the disk check
        for cell in cells:
            if cell.id in later:
                footprint.make_room(local, opts.cache_keep, ctx.builder.name, ctx.builder.driver)
            record = seal.record(run, run_cell(cell, matrix, statuses[cell.id], ctx, opts, run_dir), ctx.key,
                                 run_dir / "results.json", definition=cell.definition)
            tag_cell(run, matrix, ctx, run_dir / "results.json")
            bound_cache_after(record, opts.cache_keep, ctx.builder.name)
            if opts.fail_fast and results.is_unexpected(record.verdict):
                log.warn("--fail-fast: stopping after the first unexpected outcome")
                break
        bound_disk(run, tag_of, ctx, opts)
    finally:
        run.finished = results.now()
        results.save(run, run_dir / "results.json")
        # The build's own reports weigh its records as the tag step does: sealed by this process's key, judged
        # with this matrix's facts.
        if run.cells:   # a run stopped in its first cell has nothing to show, and must end as it was stopped
            shown = report.weigh.weigh_runs([run], matrix, ctx.trusted)
            report.console.summary(shown)
            report.render_all(shown, run_dir / "report", opts.env)
    return run


def bound_cache_after(record: CellResult, keep: int | None, builder: str | None) -> None:
    """After a cell that was really built, BuildKit's cache down to its bound before the next: that build's own
    records (download caches, another CPU's install stages) would otherwise pile up until the run's end, and the
    disk's peak be the whole matrix's instead of one cell above the bound."""
    if record.build is not None and record.build.status is Status.PASSED and not record.build.cached:
        footprint.prune_cache(keep, builder)


def bound_disk(run: RunResults, tag_of: footprint.CandidateTag, ctx: Context, opts: BuildOptions) -> None:
    """After a run that went through: the candidates its built cells superseded go, the BuildKit cache is
    pruned to its bound, and what the engine holds is said (build/footprint.py). The inputs each cell was
    built from are read from its image (a tree edited during the run changes what a fresh hash would say);
    no image this run built or used is removed; an engine that refuses any of it leaves a warning, never
    a failed run: every cell has ended by now."""
    import docker.errors  # the SDK where the engine is reached, not at import (cli.py)

    built = {c.cell_id: c.image.labels.get(f"{LABEL_PREFIX}.inputs", "") for c in run.cells
             if c.build is not None and c.build.status is Status.PASSED and c.image.id}
    used = {c.image.id for c in run.cells if c.image.id}
    try:
        if not opts.keep_superseded:
            found = footprint.superseded(ctx.client, {k: v for k, v in built.items() if v}, tag_of,
                                         owner=base_images.owner_labels(opts.env).get(base_images.OWNER_LABEL))
            footprint.remove_superseded(ctx.client, [(t, i) for t, i in found if i.id not in used])
        footprint.prune_cache(opts.cache_keep, ctx.builder.name)
        log.info(f"disk: {footprint.measure(ctx.client, opts.ws.runs).line()}")
    except docker.errors.DockerException as exc:
        log.warn(f"the disk was not bounded after the run (the engine said: {exc}); the cells' results stand")


def _candidate_of(cells: Mapping[str, Cell], matrix: Matrix, cell_id: str, inputs: str) -> str:
    return tags.candidate_tag(cells[cell_id], inputs, matrix.spec.tags)


def prepare(client: docker.DockerClient, matrix: Matrix, buildable: Sequence[Cell], opts: BuildOptions,
            run_dir: Path) -> Context:
    info = client.info()
    # A tensor-parallel profile spans every GPU of the runner, in the build as in `verify IMAGE` (verify/tp.py)
    given = provision.find(client, opts.gpu, info, all_gpus=tp.wants_all_gpus(matrix.spec.profiles[opts.profile]))
    builder = cache.builder(opts.builder, info)
    check_compression(builder, opts.layer_compression)
    shared, notes = cache.plan(shared_cache(matrix, opts), builder) if buildable else (None, [])
    for note in notes:
        log.warn(note)
    if builder.loads and shared is None and any(matrix.spec.bases[c.base_name].debootstrap for c in buildable):
        msg = (f"the buildx builder {builder.name} ({builder.driver} driver) cannot see this engine's images, "
               "so it cannot build on a bootstrapped base")
        raise ConfigError(msg, hint="configure a shared build cache (`cache.ref` in matrix.yaml or --cache-ref): "
                                    "the base is shared through it; or build with the engine's own builder")
    natives = native.native_bases(matrix.spec, buildable)
    bases = {name: base_images.ensure(name, matrix.spec.bases[name], client=client, logs=run_dir,
                                      shared=partial(shared.base_ref, name) if shared else None,
                                      push=bool(shared and shared.exports),
                                      labels=base_images.owner_labels(opts.env))
             for name in sorted({c.base_name for c in buildable} | set(natives.values()))}
    history = [] if opts.reverify or not opts.verify else reuse.saved_runs(opts.ws.runs, skip=opts.run_id)
    key = keys.signing_key(opts.env)
    ctx = Context(client=client, provision=given, bases=bases, recipe=buildx.Recipe.of(opts.ws), history=history,
                  builder=builder, cache=shared, key=key, trusted=keys.trusted(opts.ws.root, opts.env),
                  natives=natives)
    ctx.candidates.update({c.id: candidate(c, matrix, ctx, opts) for c in buildable})
    return ctx


def check_compression(builder: cache.Builder, compression: str) -> None:
    """zstd layers come only from a builder whose output the build names (a stamped docker archive, BuildKit 0.13 or
    later): Docker 20.10's own builder (BuildKit 0.8) writes gzip into the engine's store, and nothing else."""
    if compression != "gzip" and not builder.rewrites_timestamps:
        named = f"{builder.name or '(default)'} ({builder.driver} driver, BuildKit {builder.buildkit or '?'})"
        msg = (f"the builder {named} cannot write {compression} layers: this project writes them only through a "
               "builder of BuildKit 0.13 or later, whose docker-archive output it stamps (docs/speed.md)")
        raise ConfigError(msg, hint="drop --layer-compression, or build with such a builder (--builder)")


def shared_cache(matrix: Matrix, opts: BuildOptions) -> Cache | None:
    """matrix.yaml's `cache:`, with the ref `--cache-ref` gives (which may also turn it on, or off)."""
    if opts.cache_ref is None:
        return matrix.spec.cache
    if not opts.cache_ref:
        return None
    try:
        base = matrix.spec.cache.model_dump() if matrix.spec.cache else {}
        return Cache.model_validate({**base, "ref": opts.cache_ref})
    except ValidationError as exc:
        why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        msg = f"--cache-ref {opts.cache_ref!r} is not a registry repository reference ({why})"
        raise ConfigError(msg, hint="e.g. --cache-ref registry.example.com/sglang-images/cache") from None


def related_cells(cell: Cell, matrix: Matrix) -> list[str]:
    """Cells whose builds share layers with `cell` (same base and torch lane): their caches are imported."""
    return [c.id for c in matrix.cells
            if c.excluded is None and c.id != cell.id and c.lane_layer_id == cell.lane_layer_id]


def candidate(cell: Cell, matrix: Matrix, ctx: Context, opts: BuildOptions) -> tuple[str, str]:
    """(inputs hash, candidate tag) of a buildable cell: the tag exists exactly when nothing changed (the layers'
    compression is an input: zstd is another image of the same files)."""
    inputs = buildx.inputs_hash(cell, ctx.bases[cell.base_name], paths_for(cell, opts.ws.locks), ctx.recipe,
                                ctx.native_of(cell), opts.layer_compression)
    return inputs, tags.candidate_tag(cell, inputs, matrix.spec.tags)


def _image_exists(client: docker.DockerClient, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def check_locks(matrix: Matrix, cells: Sequence[Cell], ws: Workspace) -> dict[str, LockStatus]:
    """Every selected cell's lock must be current: a stale lock is an error before anything builds."""
    statuses = {c.id: status_of(matrix, c, ws.locks) for c in cells}
    stale = [f"{cid} ({s.state}{': ' + s.reason if s.reason else ''})" for cid, s in statuses.items()
             if s.state in ("missing", "stale") and next(c for c in cells if c.id == cid).excluded is None]
    if stale:
        msg = "lockfiles are not current for: " + "; ".join(stale)
        raise LockError(msg, hint="run `nox -s lock` (and commit lockfiles/)")
    return statuses


def run_cell(cell: Cell, matrix: Matrix, status: LockStatus, ctx: Context, opts: BuildOptions,
             run_dir: Path) -> CellResult:
    """The one record of a cell: excluded (or its locks not usable), else built, then verified (or its saved
    verification reused) unless --no-verify, then staged with --stage."""
    given = Given(axes=cell.axes(), targets=cell.archs, expected=cell.expected_failure(), versions=status.versions,
                  run_id=opts.run_id)
    if cell.excluded or status.state != "ok":
        return cell_record(cell.id, replace(given, excluded=cell.excluded or f"{status.state}: {status.reason}"))
    base = ctx.bases[cell.base_name]
    if ctx.builder.loads and ctx.cache and matrix.spec.bases[cell.base_name].debootstrap:
        # A builder outside the engine takes FROM images from a registry: the shared copy of the base.
        base = replace(base, ref=ctx.cache.base_ref(cell.base_name, base.inputs_hash))
    locks = paths_for(cell, opts.ws.locks)
    given = replace(given, locks={opts.ws.shown(p): hashlib.sha256(p.read_bytes()).hexdigest()
                                  for p in (locks.lane, locks.sglang, locks.toolkit) if p is not None})
    inputs, tag = ctx.candidates[cell.id]
    build_log = run_dir / cell.id / "build.log"
    with log.group(f"build {cell.id}"), log.working(f"building {cell.id} (log: {build_log})"):
        # Cold (`compare --rebuild`): no layer from any cache, every download and install again (the base image
        # stays), and nothing exported to the shared cache either.
        shared = [] if ctx.cache is None or opts.cold else ctx.cache.args(cell.id, related_cells(cell, matrix))
        extra = ctx.builder.args() + shared + (["--no-cache"] if opts.cold else [])
        what = buildx.CellInputs(cell, base, locks, ctx.recipe, ctx.native_of(cell))
        # Layer file times clamped to the base's date where the builder can (BuildKit >= 0.13), else as built.
        epoch = (buildx.source_date_epoch(ctx.client, ctx.bases[cell.base_name].ref)
                 if ctx.builder.rewrites_timestamps else None)
        build, image = buildx.build_cell(what, tag=tag, inputs=inputs, client=ctx.client, log_file=build_log,
                                         env=opts.env, extra_args=extra, epoch=epoch,
                                         compression=opts.layer_compression)
    log.step(cell.id, "build", build.status.value, build.duration_s,
             "cached" if build.cached else (build.reason or ""))
    if build.status is Status.PASSED and opts.verify:
        record = verified(cell_request(cell, matrix, ctx, opts, image), ctx, given, build, image)
    else:
        record = cell_record(cell.id, given, build=build, image=image)
    if opts.stage and record.verdict in staging.STAGED_VERDICTS:
        with log.working(f"staging {cell.id} in {opts.stage}"):
            staged = staging.stage(ctx.client, record, opts.stage, opts.env, log_file=run_dir / cell.id / "stage.log")
        record = record.model_copy(update={"image": staged})   # judged once: where the image went changes no verdict
        describe_staged(cell, matrix, ctx, opts, record, run_dir)
    return record


def describe_staged(cell: Cell, matrix: Matrix, ctx: Context, opts: BuildOptions, record: CellResult,
                    run_dir: Path) -> None:
    """The staged image's SBOM and provenance, signed and attached to its platform manifest (attest/): a step of
    its own, whose failure is said and leaves the image without them (a policy requiring provenance refuses it)."""
    image, boot = record.image, matrix.spec.bases[cell.base_name].debootstrap
    digest = image.platform_digest or image.digest
    assert image.repository and digest and image.id, "a staged image has its repository, digest and id"
    base = ctx.bases[cell.base_name]
    inputs, tag = ctx.candidates[cell.id]
    locks = paths_for(cell, opts.ws.locks)
    own = {flavour: pins for flavour, pins in cell.toolkit.pip.items() if flavour == cell.lane.cuda}
    facts = BuildFacts(
        cell_id=cell.id, definition_digest=cell.definition_digest.removeprefix("sha256:"),
        parameters={"platform": cell.platform, "candidate": tag, "inputs": inputs, "toolkit": cell.toolkit_name,
                    "targets": list(cell.archs)},
        locks=[(p.relative_to(opts.ws.locks).as_posix(), p) for p in (locks.lane, locks.sglang, locks.toolkit) if p],
        base={"suite": boot.suite if boot else "", "variant": boot.variant if boot else "", "id": base.id,
              "inputs": base.inputs_hash, "ref": base.ref},
        engine=str(ctx.client.version().get("Version", "")), builder_id=verdicts.run_url(opts.env) or LOCAL_BUILDER,
        run_id=opts.run_id, finished=results.now(), cached=bool(record.build and record.build.cached))
    subject = Subject(repository=image.repository, digest=digest, cell_id=cell.id, apt=tuple(cell.toolkit.apt),
                      pip=tuple(p for pins in own.values() for p in pins))
    request = describe.Request(image=image.id, subject=subject, facts=facts,
                               root=opts.ws.root, run_dir=run_dir, key=ctx.key, trusted=ctx.trusted)
    try:
        with log.working(f"SBOM and provenance of {cell.id}"):
            made = describe.make(ctx.client, request)
    except FatalError as exc:
        log.step(cell.id, "describe", "failed", detail=exc.message)
        return
    log.step(cell.id, "describe", "passed", detail=", ".join(opts.ws.shown(p) for p in made))


def verified(request: VerificationRequest, ctx: Context, given: Given, build: BuildResult,
             image: ImageInfo) -> CellResult:
    """The record of a built cell's verification: its saved one reused where every input is unchanged and the
    outcome, judged against today's `expect:`, is still settled (reuse.py); else the ladder, run now."""
    key = reuse.key(image.id or str(image.ref), request.plan, ctx.provision.discovery, gpu=request.gpu,
                    per_gpu=request.per_gpu)
    reused = reuse.find(ctx.history, request.cell_id, key, ctx.trusted)
    if reused:
        record = cell_record(request.cell_id, given, build=build, image=image, stages=reused.stages(),
                             verification_key=key, reused_from=reused.origin())
        if record.verdict in reuse.SETTLED:
            log.step(request.cell_id, "verify", "reused", 0.0,
                     f"inputs unchanged since {reused.origin()} (--reverify to run)")
            return record
    with log.working(f"verifying {request.cell_id} (log: {request.log_file})"):
        stages = _verify(ctx.client, image.id or str(image.ref), request)
    record = cell_record(request.cell_id, given, build=build, image=image, stages=stages, verification_key=key)
    status, detail = report.console.verification_step(stages, record.verdict)
    log.step(request.cell_id, "verify", status, sum(s.duration_s for s in stages), detail)
    return record


def tag_cell(run: RunResults, matrix: Matrix, ctx: Context, path: Path) -> None:
    """The tag step for the cell just recorded: its sealed record through the gate `tag` and `promote` use
    (publish/trusted.py), good tags on the tested image, the tags recorded."""
    record = run.cells[-1]
    if not record.verified_archs:
        return
    checked = trusted.check(record, len(run.cells) - 1, matrix, ctx.trusted)
    if isinstance(checked, trusted.Refused) or checked.why_not:
        log.step(record.cell_id, "tag", "skipped", detail=checked.why_not or "")
        return
    refs = tags.apply(ctx.client, checked, matrix.spec.tags)
    run.cells[-1] = record.model_copy(update={"tags": refs})
    results.save(run, path)


def cell_request(cell: Cell, matrix: Matrix, ctx: Context, opts: BuildOptions, built: ImageInfo) -> VerificationRequest:
    """The request of one built cell's verification: its targets and lane, the stages the run verifies, the GPUs
    and network the engine gives every container; the facts the build has just read (carried by the facts
    stage, named by the image's id)."""
    asked = replace(opts, stages=opts.verified_stages)
    chosen = provision.plan(asked, matrix.profile(opts.profile), cell=cell)
    facts = built.model_copy(update={"ref": built.id}) if built.id else None
    return provision.request(asked, ctx.provision, chosen, cell_id=cell.id, cell=cell, facts=facts)


def _verify(client: docker.DockerClient, image: str, request: VerificationRequest) -> list[StageResult]:
    """The ladder in one container, or (--per-gpu) one per GPU, combined."""
    if request.per_gpu and request.provision.discovery.usable_in_containers:
        return combine_per_gpu(verify_per_gpu(client, image, request))
    return verify_image(client, image, request)
