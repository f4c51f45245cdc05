"""`python -m buildscripts compare IMAGE_A IMAGE_B`: are two images the same, file by file, and if not, why not.

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

from .. import arguments
from ..workspace import Workspace

ABOUT = "compare two images file by file: identical, or what differs and why"


@dataclass(frozen=True, kw_only=True)
class Options:
    a: str
    b: str
    out: Path            # where compare.json and compare.md go


def _slug(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", ref.removeprefix("sha256:"))[:60]


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    del env
    parser = argparse.ArgumentParser(prog="python -m buildscripts compare", description=__doc__.splitlines()[0])
    parser.add_argument("a", metavar="IMAGE_A", help="an image of the engine (tag or id)")
    parser.add_argument("b", metavar="IMAGE_B", help="the image to compare it with")
    parser.add_argument("--out", type=arguments.path_argument, default=None,
                        help="folder for compare.json and compare.md (default: runs/compare/A--B)")
    args = parser.parse_args(list(argv))
    out = args.out or ws.runs / "compare" / f"{_slug(args.a)}--{_slug(args.b)}"
    return Options(a=args.a, b=args.b, out=out)


def run(options: Options) -> int:
    from .. import engine, log
    from ..compare import diff, images, render
    from ..errors import ImagesDiffer

    client = engine.connect()
    with log.working(f"reading {options.a} and {options.b}"):
        comparison = diff.compare(images.read(client, options.a), images.read(client, options.b))
    data, page = render.write(comparison, options.out)
    for line in render.lines(comparison):
        print(line)
    if comparison.identical:
        log.info(f"report: {page}")
        return 0
    count = len(comparison.differences)
    msg = f"{options.a} and {options.b} differ: {count} difference(s) in {len(comparison.groups)} group(s)"
    raise ImagesDiffer(msg, hint=f"every difference: {page} (and {data})")
