"""`python -m buildscripts tag`: apply the good tags that verified cells of a results file earned.

For images verified outside `nox -s build` (`verify IMAGE` on a GPU runner, an image built elsewhere):
the same policy as the pipeline's tag step. The verdict is judged again from the stages, the image is
tagged by the id the results name, and the results file is saved with the tags it now carries.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker.errors

from .. import engine, log, matrix, results
from ..errors import ResultsError, TagError
from ..workspace import Workspace
from . import recorded, tags


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    del env  # nothing here reads the environment
    ws = ws or Workspace.at()
    parser = argparse.ArgumentParser(prog="python -m buildscripts tag", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True, help="a results.json (from `verify` or `build`)")
    parser.add_argument("--matrix", type=Path, default=ws.matrix, help="matrix.yaml with the tag templates")
    parser.add_argument("--only", action="append", default=[], metavar="GLOB", help="cell id glob(s)")
    parser.add_argument("--allow-other-matrix", action="store_true",
                        help="tag from results made with another matrix.yaml (its tag templates apply)")
    args = parser.parse_args(list(argv))
    spec = matrix.load(args.matrix).spec
    cfg = spec.tags
    run = results.load(args.results)
    warning = results.check_matrix(run, args.results, args.matrix, results.matrix_digest(spec),
                                   allow_other=args.allow_other_matrix)
    if warning:
        log.warn(warning)
    recorded.check_selection({args.results: run}, args.only)
    recorded.check_writable(args.results, "tag")
    client = engine.connect()
    tagged = 0
    for position in recorded.positions(run, args.only):
        cell = run.cells[position]
        why_not = tags.not_good_because(cell)
        if why_not:
            log.step(cell.cell_id, "tag", "skipped", detail=why_not)
            continue
        try:
            refs = tags.apply_good_tags(client, cell, cfg)
        except docker.errors.ImageNotFound:
            msg = f"{cell.cell_id}: the verified image {cell.image.id} is not in this engine"
            raise ResultsError(msg, hint="tag on the machine that verified it") from None
        except (docker.errors.APIError, docker.errors.BuildError) as exc:
            msg = f"{cell.cell_id}: the engine refused its good tags: {exc}"
            raise TagError(msg, hint="nothing was tagged for this cell; try again") from None
        run.cells[position] = cell.model_copy(update={"tags": refs})
        recorded.save(run, args.results, f"{cell.cell_id} was tagged {', '.join(refs)}")
        log.step(cell.cell_id, "tag", "passed", detail=", ".join(refs))
        tagged += 1
    log.info(f"{tagged} cell(s) tagged from {args.results}")
    return 0
