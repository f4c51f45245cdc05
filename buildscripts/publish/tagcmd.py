"""`python -m buildscripts tag`: apply the good tags that verified cells of a results file earned.

For images verified outside `nox -s build` (`verify IMAGE` on a GPU runner, an image built elsewhere):
the same policy as the pipeline's tag step, through the same gate (publish/trusted.py): only records a
trusted verifier sealed, of cells of matrix.yaml, are judged again (with the matrix's targets) and tagged;
a refused cell is skipped with the reason. The tested image itself is tagged, by the id the results name,
and the results file is saved with the tags it now carries.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker
import docker.errors

from .. import engine, log, results
from ..errors import ResultsError, TagError
from ..matrix import load
from ..matrix.schema import Tags
from ..workspace import Workspace
from . import recorded, tags, trusted


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws, env = ws or Workspace.at(), env or {}
    parser = argparse.ArgumentParser(prog="python -m buildscripts tag", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True, help="a results.json (from `verify` or `build`)")
    parser.add_argument("--matrix", type=Path, default=ws.matrix, help="matrix.yaml with the cells and tag templates")
    parser.add_argument("--only", action="append", default=[], metavar="GLOB", help="cell id glob(s)")
    trusted.add_arguments(parser)
    args = parser.parse_args(list(argv))
    matrix = load(args.matrix)
    run = results.load(args.results)
    warning = trusted.check_run(run, args.results, args.matrix, matrix, allow_other=args.allow_other_matrix)
    if warning:
        log.warn(warning)
    recorded.check_selection({args.results: run}, args.only)
    recorded.check_writable(args.results, "tag")
    checked = trusted.sift(run, matrix, trusted.keys_from(args, ws, env), args.only)
    trusted.refuse(checked, args.results)
    client = engine.connect()
    tagged = 0
    for cell in checked:
        if isinstance(cell, trusted.Refused) or cell.why_not:
            log.step(cell.cell_id, "tag", "skipped", detail=cell.why_not or "")
            continue
        refs = apply(client, cell, matrix.spec.tags)
        run.cells[cell.position] = cell.record.model_copy(update={"tags": refs})
        recorded.save(run, args.results, f"{cell.cell_id} was tagged {', '.join(refs)}")
        log.step(cell.cell_id, "tag", "passed", detail=", ".join(refs))
        tagged += 1
    log.info(f"{tagged} cell(s) tagged from {args.results}")
    return 0


def apply(client: docker.DockerClient, cell: trusted.Trusted, cfg: Tags) -> list[str]:
    """The cell's good tags on its tested image, engine refusals said as such (the pipeline's tag step too)."""
    try:
        return tags.apply_good_tags(client, cell, cfg)
    except docker.errors.ImageNotFound:
        msg = f"{cell.cell_id}: the verified image {cell.image_id} is not in this engine"
        raise ResultsError(msg, hint="tag on the machine that verified it") from None
    except docker.errors.APIError as exc:
        msg = f"{cell.cell_id}: the engine refused its good tags: {exc}"
        raise TagError(msg, hint="tags already moved point at the verified image; try again") from None
