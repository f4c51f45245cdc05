"""`nox -s build`: select cells, lock-check, build, verify, tag (or stage for GPU jobs elsewhere), report
(pipeline.py); the exit code says whether every cell ended as expected."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import arguments
from ..errors import ConfigError, RunFailed
from ..pipeline_options import (
    BUILDER_ENV,
    CACHE_ENV,
    CACHE_KEEP_ENV,
    COMPRESSIONS,
    KEEP_SUPERSEDED_ENV,
    LAYER_COMPRESSION_ENV,
    BuildOptions,
)
from ..verify.asked import KEEP_ENV
from ..workspace import Workspace

ABOUT = "select cells, lock-check, build, verify, tag, report"


@dataclass(frozen=True, kw_only=True)
class Options(BuildOptions):
    """What `build` takes besides what the pipeline reads (BuildOptions): the cells it acts on."""

    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    import uuid

    from .. import hostenv
    from ..build import footprint
    from ..matrix import load
    from ..pipeline_options import check_options
    from ..verify.plan import stages_argument

    ap = argparse.ArgumentParser(prog="nox -s build --", description="Build and verify the selected cells.")
    arguments.add_matrix(ap, ws)
    arguments.add_selection(ap, what="cell ids to build", skip=True)
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first unexpected outcome")
    ap.add_argument("--no-verify", dest="verify", action="store_false", help="build only")
    ap.add_argument("--stages", help="comma-separated verification stages (default: all)")
    ap.add_argument("--runs", type=arguments.path_argument, default=ws.runs, help="where run folders go")
    ap.add_argument("--run-id", default="", help="name of this run's folder (default: time + random)")
    arguments.add_verification(ap, profile=Options.profile, gpu=Options.gpu)
    ap.add_argument("--per-gpu", action="store_true",
                    help="one container per GPU, side by side; a stage passes only if it passed on every GPU")
    ap.add_argument("--reverify", action="store_true",
                    help="verify every cell again, even where saved results of the same inputs exist")
    ap.add_argument("--builder", default=env.get(BUILDER_ENV) or None,
                    help=f"buildx builder to build with, any driver (default: ${BUILDER_ENV}, else the current one)")
    ap.add_argument("--cache-ref", metavar="REF", default=env.get(CACHE_ENV) or None,
                    help="registry repository of a build cache shared between runners (default: "
                         f"${CACHE_ENV}, else matrix.yaml's `cache.ref`; '' turns it off)")
    ap.add_argument("--cache-keep", default=env.get(CACHE_KEEP_ENV) or footprint.DEFAULT_CACHE_KEEP, metavar="SIZE",
                    help="BuildKit cache kept after the run, least recently used pruned first (default: "
                         f"${CACHE_KEEP_ENV}, else {footprint.DEFAULT_CACHE_KEEP}; `none`: unbounded)")
    ap.add_argument("--keep-superseded", action="store_true", default=hostenv.switch(env, KEEP_SUPERSEDED_ENV),
                    help="keep the candidate images of earlier inputs of the cells built (default: removed; "
                         f"{KEEP_SUPERSEDED_ENV}=1 keeps them)")
    ap.add_argument("--stage", metavar="REPO", default=None,
                    help="build once for GPU jobs elsewhere: run the CPU stages, push what passed them to this "
                         "registry repository and record its digest (then `nox -s matrix -- --github --staged "
                         "RESULTS` lists the verify jobs)")
    ap.add_argument("--layer-compression", choices=COMPRESSIONS, default=env.get(LAYER_COMPRESSION_ENV) or "gzip",
                    help="the image layers' compression: zstd pulls faster on Docker 23+ and containerd, which alone "
                         "can pull it (not Docker 20.10); written by a builder of BuildKit 0.13 or later only "
                         f"(default: ${LAYER_COMPRESSION_ENV}, else gzip)")
    a = ap.parse_args(list(argv))
    stages, gpu, cache_keep = stages_argument(a.stages), arguments.check_gpu(a.gpu), _cache_keep(a.cache_keep, env)
    opts = Options(ws=dataclasses.replace(ws, matrix=a.matrix, runs=a.runs), matrix=load(a.matrix, env), env=env,
                   only=tuple(a.only), skip=tuple(a.skip), stage=a.stage, layer_compression=a.layer_compression,
                   fail_fast=a.fail_fast, verify=a.verify,
                   stages=tuple(stages) if stages else None, profile=a.profile, gpu=gpu, per_gpu=a.per_gpu,
                   reverify=a.reverify, builder=a.builder, cache_ref=a.cache_ref, cache_keep=cache_keep,
                   keep_superseded=a.keep_superseded, keep_containers=env.get(KEEP_ENV) == "1",
                   run_id=a.run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    check_options(opts.matrix, opts)   # before anything is built, not after the first hour-long cell
    return opts


def _cache_keep(value: str, env: Mapping[str, str]) -> int | None:
    """--cache-keep's bytes; a bad value that came from the environment is named as such."""
    from ..build import footprint

    try:
        return footprint.cache_keep(value)
    except ConfigError as exc:
        if env.get(CACHE_KEEP_ENV) == value:
            msg = f"{CACHE_KEEP_ENV}={value!r} is not a size"
            raise ConfigError(msg, hint=exc.hint) from None
        raise


def run(options: Options) -> int:
    from .. import pipeline, results
    from ..matrix import select

    matrix = options.matrix
    chosen = select(matrix.cells, options.only, options.skip, include_excluded=True)
    if not any(c.excluded is None for c in chosen):
        select(chosen, options.only, options.skip)  # raises SelectionError with the explanation
    done = pipeline.execute(matrix, chosen, options)
    unexpected = [c for c in done.cells if results.is_unexpected(c.verdict)]
    if unexpected:
        names = ", ".join(f"{c.cell_id} ({c.verdict.value})" for c in unexpected)
        msg = f"{len(unexpected)} cell(s) ended unexpectedly: {names}"
        raise RunFailed(msg, hint=f"logs and results: {options.ws.run_dir(options.run_id)}")
    return 0
