"""`python -m buildscripts lock`: hash-pinned lockfiles per layer, and a loud refusal of drift.

    lock [--only GLOB] [--skip GLOB] [--check] [--upgrade] [--matrix PATH]

Writes lockfiles/{lanes,sglang,toolkits}/*.txt and lockfiles/index.json (per cell: state, reason,
inputs, key versions). A cell whose resolution breaks the matrix's promise (torch version, CUDA
flavour, SGLang's own torch pin, toolkit coherence) is recorded as `incompatible` with the reason,
one whose packages cannot be fetched as `unresolvable`; neither fails the run, neither is built.
`--check` resolves nothing and writes nothing: it fails when a lock is stale or missing.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import arguments
from ..workspace import Workspace

ABOUT = "resolve hash-pinned lockfiles per layer (--check, --upgrade)"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace                       # its matrix is --matrix; its locks are the project's lockfiles/
    env: Mapping[str, str]              # the host's index settings (PIP_*, UV_*)
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    check: bool = False                 # fail on stale or missing locks; write nothing
    upgrade: bool = False               # re-resolve every selected lock on purpose


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    parser = argparse.ArgumentParser(prog="python -m buildscripts lock", description=__doc__.splitlines()[0])
    arguments.add_selection(parser, what="cell ids to lock", skip=True)
    parser.add_argument("--check", action="store_true", help="fail on stale or missing locks; write nothing")
    parser.add_argument("--upgrade", action="store_true", help="re-resolve every selected lock on purpose")
    arguments.add_matrix(parser, ws, help="the matrix.yaml to lock (its locks go to the project's lockfiles/)")
    args = parser.parse_args(list(argv))
    return Options(ws=dataclasses.replace(ws, matrix=args.matrix), env=env, only=tuple(args.only),
                   skip=tuple(args.skip), check=args.check, upgrade=args.upgrade)


def run(options: Options) -> int:
    from .. import matrix as matrix_mod
    from ..lock import check, lock_cells

    matrix = matrix_mod.load(options.ws.matrix, options.env)
    # opt-in cells too: their locks are kept current (and checked) for whoever selects them
    cells = matrix_mod.select(matrix.cells, options.only, options.skip, include_opt_in=True)
    if options.check:
        return check(matrix, cells, options.ws)
    everything = not options.only and not options.skip
    lock_cells(matrix, cells, options.ws, upgrade=options.upgrade, prune=everything, env=options.env)
    return 0
