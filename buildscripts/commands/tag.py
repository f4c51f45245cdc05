"""`python -m buildscripts tag`: apply the good tags that verified cells of results files earned.

For images verified outside `nox -s build` (`verify IMAGE` on a GPU runner, an image built elsewhere):
the same policy as the pipeline's tag step, through the same gate (publish/trusted.py): only records a
trusted verifier sealed, of cells of matrix.yaml, are judged again (with the matrix's targets) and tagged;
a refused cell is skipped with the reason. The tested image itself is tagged, by the id the results name,
and each results file (`--results GLOB`, repeatable) is saved with the tags it now carries.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import arguments, log
from ..workspace import Workspace

ABOUT = "apply the good tags that verified cells of a results file earned"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]
    results: tuple[str, ...]            # globs of the files read, and written back with the tags applied
    matrix: Path
    only: tuple[str, ...] = ()
    trust_keys: tuple[Path, ...] = ()


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    parser = argparse.ArgumentParser(prog="python -m buildscripts tag", description=__doc__.splitlines()[0])
    arguments.add_results(parser, default="none: name them (a `verify` or `build` run's results.json); the tags "
                                          "applied are recorded in them")
    arguments.add_matrix(parser, ws, help="matrix.yaml with the cells and tag templates")
    arguments.add_selection(parser, what="cell ids to tag")
    arguments.add_trust_keys(parser)
    args = parser.parse_args(list(argv))
    if not args.results:
        parser.error("the following arguments are required: --results")
    return Options(ws=ws, env=env, results=tuple(args.results), matrix=args.matrix,
                   only=tuple(args.only), trust_keys=tuple(args.trust_key))


def run(options: Options) -> int:
    from .. import engine
    from ..matrix import load
    from ..publish import recorded, tags, trusted
    from ..trust import keys

    matrix = load(options.matrix)
    trusted_keys = keys.trusted(options.ws.root, options.env, options.trust_keys)
    runs = recorded.load_checked(arguments.results_files(options.results), matrix, trusted_keys, only=options.only,
                                 command="tag")
    client = engine.connect()
    for path, run in runs.items():
        tagged = 0
        for cell in trusted.sift(run, matrix, trusted_keys, options.only):
            if isinstance(cell, trusted.Refused) or cell.why_not:
                log.step(cell.cell_id, "tag", "skipped", detail=cell.why_not or "")
                continue
            refs = tags.apply(client, cell, matrix.spec.tags)
            run.cells[cell.position] = cell.record.model_copy(update={"tags": refs})
            recorded.save(run, path, f"{cell.cell_id} was tagged {', '.join(refs)}")
            log.step(cell.cell_id, "tag", "passed", detail=", ".join(refs))
            tagged += 1
        log.info(f"{tagged} cell(s) tagged from {path}")
    return 0
