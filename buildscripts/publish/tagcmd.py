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

import docker
import docker.errors

from .. import arguments, engine, log
from ..errors import ResultsError, TagError
from ..matrix import load
from ..matrix.schema import Tags
from ..workspace import Workspace
from . import recorded, tags, trusted


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws, env = ws or Workspace.at(), env or {}
    parser = argparse.ArgumentParser(prog="python -m buildscripts tag", description=__doc__.splitlines()[0])
    arguments.add_results(parser, default="none: name them (a `verify` or `build` run's results.json); the tags "
                                          "applied are recorded in them")
    arguments.add_matrix(parser, ws, help="matrix.yaml with the cells and tag templates")
    arguments.add_selection(parser, what="cell ids to tag")
    trusted.add_arguments(parser)
    args = parser.parse_args(list(argv))
    if not args.results:
        parser.error("the following arguments are required: --results")
    matrix = load(args.matrix)
    keys = trusted.keys_from(args, ws, env)
    runs = recorded.load_checked(arguments.results_files(args.results), matrix, keys, only=args.only,
                                 command="tag")
    client = engine.connect()
    for path, run in runs.items():
        tagged = 0
        for cell in trusted.sift(run, matrix, keys, args.only):
            if isinstance(cell, trusted.Refused) or cell.why_not:
                log.step(cell.cell_id, "tag", "skipped", detail=cell.why_not or "")
                continue
            refs = apply(client, cell, matrix.spec.tags)
            run.cells[cell.position] = cell.record.model_copy(update={"tags": refs})
            recorded.save(run, path, f"{cell.cell_id} was tagged {', '.join(refs)}")
            log.step(cell.cell_id, "tag", "passed", detail=", ".join(refs))
            tagged += 1
        log.info(f"{tagged} cell(s) tagged from {path}")
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
