"""`nox -s promote`: publish the cells that earned good tags to a registry, by digest.

Cells whose records name a staged digest are promoted by pointing the good tags at that digest in the registry
(publish/bydigest.py); the others, built and verified on one machine, are pushed from its engine
(publish/promotion.py). Only what the gate lets through (publish/trusted.py) is promoted; each results file is
saved with what was pushed.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import arguments, log
from ..errors import ConfigError, ResultsError
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..matrix import Matrix
    from ..results import RunResults
    from ..trust.keys import PublicKey

ABOUT = "push good tags to a registry, by digest"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace                       # its matrix is --matrix
    env: Mapping[str, str]
    results: tuple[str, ...] = ()       # globs of the files read (default: the newest run's), written back
    registry: str | None = None         # HOST[:PORT][/NAMESPACE] (default: registry.url in matrix.yaml)
    only: tuple[str, ...] = ()
    trust_keys: tuple[Path, ...] = ()
    arch_tags_only: bool = False        # only the tags that name an arch (a job that verified one arch)
    repair: bool = False                # point a moved good tag back at these results' verified digest
    lock_wait: float | None = None      # how long to wait for another promotion (None: writer_lock's default)


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from ..registry.writer_lock import DEFAULT_WAIT_S

    parser = argparse.ArgumentParser(prog="promote", description=__doc__.splitlines()[0] if __doc__ else None)
    arguments.add_results(parser, default="the newest run's; the tags pushed are recorded in them")
    parser.add_argument("--registry", help="HOST[:PORT][/NAMESPACE] (default: registry.url in matrix.yaml)")
    arguments.add_matrix(parser, ws, help="matrix.yaml with the cells, tag templates and registry")
    arguments.add_selection(parser, what="cell ids to promote")
    arguments.add_trust_keys(parser)
    parser.add_argument("--arch-tags-only", action="store_true",
                        help="push only the tags that name an arch (a CI job that verified one arch of a cell)")
    parser.add_argument("--repair", action="store_true",
                        help="point a good tag that moved since these results promoted it back at their verified "
                             "digest (without it, such a tag is refused: it may be a newer promotion's)")
    parser.add_argument("--lock-wait", type=float, default=None, metavar="SECONDS",
                        help="how long to wait for another promotion of the same repository (default: "
                             f"{DEFAULT_WAIT_S:.0f})")
    args = parser.parse_args(list(argv))
    return Options(ws=dataclasses.replace(ws, matrix=args.matrix), env=env, results=tuple(args.results),
                   registry=args.registry, only=tuple(args.only), trust_keys=tuple(args.trust_key),
                   arch_tags_only=args.arch_tags_only, repair=args.repair, lock_wait=args.lock_wait)


def run(options: Options) -> int:
    from .. import engine
    from ..matrix import load
    from ..publish import bydigest, recorded
    from ..publish.promotion import arch_tags_only, promote_file
    from ..registry import through_engine, writer_lock
    from ..trust import keys

    ws, env, only = options.ws, options.env, options.only
    matrix = load(ws.matrix)
    url = options.registry or matrix.spec.registry.url
    if not url:
        msg = "no registry to promote to"
        raise ConfigError(msg, hint="pass --registry HOST:PORT or set registry.url in matrix.yaml")
    url = through_engine.check_url(url)
    paths = arguments.results_files(options.results) or _newest_results(ws.runs)
    if not paths:
        msg = "no results to promote (looked for runs/*/results.json)"
        raise ResultsError(msg, hint="run `nox -s build` first, or pass --results PATH")
    trusted_keys = keys.trusted(ws.root, env, options.trust_keys)
    runs = recorded.load_checked(paths, matrix, trusted_keys, only=only, command="promote")
    total = bydigest.promote(runs, matrix, url, trusted_keys, env, only=only, repair=options.repair,
                             wait_s=writer_lock.DEFAULT_WAIT_S if options.lock_wait is None else options.lock_wait,
                             log_file=ws.runs / f"promote-{time.strftime('%Y%m%d-%H%M%S')}.log")
    if any(_pushed_from_here(run, matrix, trusted_keys, only) for run in runs.values()):
        client = engine.connect()
        cfg = arch_tags_only(matrix.spec.tags) if options.arch_tags_only else matrix.spec.tags
        total += sum(promote_file(client, path, url, cfg, matrix, trusted_keys, only, env) for path in paths)
    log.info(f"{total} cell(s) promoted to {url}")
    return 0


def _newest_results(runs: Path) -> list[Path]:
    found = sorted(glob.glob(str(runs / "*" / "results.json")), key=lambda p: Path(p).stat().st_mtime)
    return [Path(found[-1])] if found else []


def _pushed_from_here(run: RunResults, matrix: Matrix, keys: Sequence[PublicKey], only: Sequence[str]) -> bool:
    """The run holds a cell that earned good tags here and names no staged digest: pushed from this engine."""
    from ..publish import trusted

    return any(isinstance(c, trusted.Trusted) and not c.why_not and c.record.tags and not c.record.image.subject
               for c in trusted.sift(run, matrix, keys, only))
