"""The options of `nox -s build`, made once from its arguments and the CI's environment (which stands in for the
flags when set), and checked against the matrix before anything is built."""

from __future__ import annotations

import argparse
import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import arguments, hostenv
from .build import footprint
from .errors import ConfigError
from .matrix import Matrix
from .registry import references
from .verify import tp
from .verify.container import KEEP_ENV
from .verify.plan import stages_argument
from .workspace import Workspace, path_argument

# CI systems configure jobs through the environment: these stand in for the flags when set (and not empty).
CACHE_ENV, BUILDER_ENV = "SGLANG_IMAGES_CACHE", "SGLANG_IMAGES_BUILDER"
CACHE_KEEP_ENV, KEEP_SUPERSEDED_ENV = "SGLANG_IMAGES_CACHE_KEEP", "SGLANG_IMAGES_KEEP_SUPERSEDED"


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
    reverify: bool = False
    builder: str | None = None
    cache_ref: str | None = None        # overrides matrix.yaml's `cache.ref` ("" turns the cache off)
    cache_keep: int | None = None       # bytes of BuildKit cache kept after the run (None: unbounded)
    keep_superseded: bool = False       # keep candidates whose cell's inputs have changed since
    keep_containers: bool = False
    stage: str | None = None            # staging repository: CPU stages here, GPU stages by digest elsewhere
    env: Mapping[str, str] = field(default_factory=dict)


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    ap = argparse.ArgumentParser(prog="nox -s build --", description="Build and verify the selected cells.")
    arguments.add_matrix(ap, ws)
    arguments.add_selection(ap, what="cell ids to build", skip=True)
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first unexpected outcome")
    ap.add_argument("--no-verify", dest="verify", action="store_false", help="build only")
    ap.add_argument("--stages", help="comma-separated verification stages (default: all)")
    ap.add_argument("--runs", type=path_argument, default=ws.runs, help="where run folders go")
    ap.add_argument("--run-id", default="", help="name of this run's folder (default: time + random)")
    arguments.add_verification(ap)
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
    a = ap.parse_args(list(argv))
    return Options(ws=dataclasses.replace(ws, matrix=a.matrix, runs=a.runs), only=a.only, skip=a.skip, stage=a.stage,
                   fail_fast=a.fail_fast, verify=a.verify, stages=stages_argument(a.stages),
                   profile=a.profile, gpu=arguments.check_gpu(a.gpu), per_gpu=a.per_gpu, reverify=a.reverify,
                   builder=a.builder, cache_ref=a.cache_ref, cache_keep=_cache_keep(a.cache_keep, env),
                   keep_superseded=a.keep_superseded, keep_containers=env.get(KEEP_ENV) == "1", env=env,
                   run_id=a.run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])


def _cache_keep(value: str, env: Mapping[str, str]) -> int | None:
    """--cache-keep's bytes; a bad value that came from the environment is named as such."""
    try:
        return footprint.cache_keep(value)
    except ConfigError as exc:
        if env.get(CACHE_KEEP_ENV) == value:
            msg = f"{CACHE_KEEP_ENV}={value!r} is not a size"
            raise ConfigError(msg, hint=exc.hint) from None
        raise


def check_options(matrix: Matrix, opts: Options) -> None:
    """Bad options fail before anything is built, not after the first hour-long cell (--stages: as parsed)."""
    if opts.stage is not None:
        conflict = "--no-verify" if not opts.verify else "--per-gpu" if opts.per_gpu else None
        if conflict:
            msg = f"--stage runs the CPU stages and pushes what passed them: it cannot go with {conflict}"
            raise ConfigError(msg, hint=f"drop {conflict}, or --stage")
        references.check_repository(opts.stage, "--stage")
    if tp.wants_all_gpus(matrix.profile(opts.profile)) and opts.per_gpu:
        msg = f"--per-gpu gives each server one GPU; profile {opts.profile!r} serves across all of them"
        raise ConfigError(msg, hint=f"drop --per-gpu (the {opts.profile} profile takes every GPU), or pick another "
                                    "--profile")
