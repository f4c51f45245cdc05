"""`python -m buildscripts compare IMAGE_A IMAGE_B`: are two images the same, file by file, and if not, why not.
`compare --rebuild CELL`: the cell built again from cold, compared with the image the build made of the same inputs.

Both images are read from the engine as it saves them (buildscripts/compare/). The console gets `identical`, or
one line per reason (content, .pyc of the same source, owner/mode, mtime only, member order only, image config)
with how many and a few paths; compare.json and compare.md under --out hold every difference. Exit 0 when
identical, 22 when they differ (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import arguments
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..compare.diff import Comparison

ABOUT = "compare two images file by file, or a cell with its cold rebuild: identical, or what differs and why"


@dataclass(frozen=True, kw_only=True)
class Options:
    a: str               # with --rebuild: the cell's id, and b is empty
    b: str
    out: Path            # where compare.json and compare.md go
    rebuild: bool = False
    ws: Workspace | None = None          # --rebuild: the project the cell is built from
    env: Mapping[str, str] | None = None
    builder: str | None = None
    keep: bool = False


def _slug(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", ref.removeprefix("sha256:"))[:60]


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from ..pipeline_options import BUILDER_ENV

    parser = argparse.ArgumentParser(prog="python -m buildscripts compare", description=__doc__.splitlines()[0])
    parser.add_argument("a", metavar="IMAGE_A", nargs="?", help="an image of the engine (tag or id)")
    parser.add_argument("b", metavar="IMAGE_B", nargs="?", help="the image to compare it with")
    parser.add_argument("--rebuild", metavar="CELL",
                        help="build CELL again from cold (no cache) and compare it with the image `nox -s build` made "
                             "of the same inputs, instead of two images")
    parser.add_argument("--builder", default=env.get(BUILDER_ENV) or None,
                        help="with --rebuild: the buildx builder (default: as `nox -s build`)")
    parser.add_argument("--keep", action="store_true",
                        help="with --rebuild: keep the rebuilt image (until the next rebuild of the cell)")
    parser.add_argument("--out", type=arguments.path_argument, default=None,
                        help="folder for compare.json and compare.md (default: runs/compare/A--B, or "
                             "runs/compare/rebuild-CELL)")
    args = parser.parse_args(list(argv))
    if args.rebuild:
        if args.a or args.b:
            parser.error("--rebuild CELL compares the cell's image with its rebuild: name no image beside it")
        out = args.out or ws.runs / "compare" / f"rebuild-{args.rebuild}"
        return Options(a=args.rebuild, b="", out=out, rebuild=True, ws=ws, env=env, builder=args.builder,
                       keep=args.keep)
    if not (args.a and args.b):
        parser.error("name two images (IMAGE_A IMAGE_B), or one cell with --rebuild CELL")
    if args.keep or args.builder != (env.get(BUILDER_ENV) or None):
        parser.error("--builder and --keep go with --rebuild CELL")
    out = args.out or ws.runs / "compare" / f"{_slug(args.a)}--{_slug(args.b)}"
    return Options(a=args.a, b=args.b, out=out)


def run(options: Options) -> int:
    from .. import engine, log
    from ..compare import diff, images

    if options.rebuild:
        return _rebuilt(options)
    client = engine.connect()
    with log.working(f"reading {options.a} and {options.b}"):
        comparison = diff.compare(images.read(client, options.a), images.read(client, options.b))
    return _answer(comparison, options.a, options.b, options.out)


def _rebuilt(options: Options) -> int:
    from .. import log
    from .. import matrix as matrix_mod
    from ..rebuild_cell import cell_of, rebuild

    assert options.ws is not None and options.env is not None, "parse gives --rebuild its project"
    matrix = matrix_mod.load(options.ws.matrix, options.env)
    cell = cell_of(matrix, options.a)
    run_id = f"rebuild-{cell.id}"
    found = rebuild(options.ws, options.env, matrix, cell, builder=options.builder, keep=options.keep, run_id=run_id)
    layers = ", ".join(f"{k} {v:.0f} s" for k, v in found.layers.items() if v)
    log.info(f"rebuilt {cell.id} from cold in {found.build_s:.0f} s ({layers or 'no layer times'}): "
             f"{found.rebuilt}{' (kept)' if options.keep else ''}")
    return _answer(found.comparison, found.reference, found.rebuilt, options.out)


def _answer(comparison: Comparison, a: str, b: str, out: Path) -> int:
    from .. import log
    from ..compare import render
    from ..errors import ImagesDiffer

    data, page = render.write(comparison, out)
    for line in render.lines(comparison):
        print(line)
    if comparison.identical:
        log.info(f"report: {page}")
        return 0
    count = len(comparison.differences)
    msg = f"{a} and {b} differ: {count} difference(s) in {len(comparison.groups)} group(s)"
    raise ImagesDiffer(msg, hint=f"every difference: {page} (and {data})")
