"""`python -m buildscripts bisect`: which packages, moved between a good lock and a bad one, break a cell.

    bisect CELL --good REF --bad REF [--stage STAGE [--class CLASS] | --bad-record RESULTS]
           [--good-record RESULTS] [--budget N] [--no-resolve] [--dry-run]

REF is a git ref of lockfiles/ (the cell's layer locks as committed), a lockfiles folder, or one lock file. Prints
the lock diff (one line per change) and the plan (the groups that move together, the budget); `--dry-run` stops
there. A bisection builds the cell with a subset of the changes at each step and runs the ladder up to the stage
bisected, nothing past it (bisect/search.py, bisect_step.py), each step in runs/bisect-CELL/step-N/.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import arguments, log
from ..errors import BisectError, SelectionError
from ..workspace import Workspace, checked_name

if TYPE_CHECKING:
    from ..bisect.groups import ResolverCheck
    from ..bisect.plan import Plan
    from ..bisect.records import Seen
    from ..bisect.search import Result, Target
    from ..bisect.sources import Side
    from ..bisect_step import StepBuild

ABOUT = "the smallest set of lock changes that breaks a cell (--dry-run: the diff and plan)"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]                 # the host's index settings, for the resolver's checks
    cell: str
    good: str
    bad: str
    stage: str | None = None               # the stage bisected: the ladder stops after it
    failure_class: str | None = None       # with --stage: only this class counts as bad
    good_record: Path | None = None
    bad_record: Path | None = None         # its failed stage and class are bisected unless --stage says
    budget: int | None = None              # builds at most (default: search.default_budget)
    resolve: bool = True                   # ask the lock step's resolver which changes must move together
    dry_run: bool = False


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from ..bisect.report import BUILD
    from ..results import LADDER

    ap = argparse.ArgumentParser(prog="nox -s bisect --", description=__doc__.splitlines()[0])
    ap.add_argument("cell", help="the cell id (as `nox -s matrix` lists it)")
    ap.add_argument("--good", required=True, metavar="REF", help="a git ref of lockfiles/, a lockfiles folder or a "
                                                                  "lock file the cell passed with")
    ap.add_argument("--bad", required=True, metavar="REF", help="the same, that the cell failed with")
    ap.add_argument("--stage", choices=(BUILD, *LADDER), help="the stage bisected (default: the bad record's)")
    ap.add_argument("--class", dest="failure_class", metavar="CLASS",
                    help="with --stage: only a failure of this class counts as bad")
    ap.add_argument("--good-record", type=arguments.path_argument, metavar="RESULTS",
                    help="the results.json the cell passed in (shown in the hand-back)")
    ap.add_argument("--bad-record", type=arguments.path_argument, metavar="RESULTS",
                    help="the results.json the cell failed in: its failed stage and class are bisected")
    ap.add_argument("--budget", type=int, metavar="N", help="builds at most (default: 4*log2(groups)+4)")
    ap.add_argument("--no-resolve", action="store_true",
                    help="take each change as its own group without asking the resolver (a quick look)")
    ap.add_argument("--dry-run", action="store_true", help="print the diff and the plan; build nothing")
    arguments.add_matrix(ap, ws)
    a = ap.parse_args(list(argv))
    if a.budget is not None and a.budget < 1:
        ap.error("--budget takes a number of builds above 0")
    if a.failure_class and not a.stage:
        ap.error("--class goes with --stage")
    if not a.dry_run and not a.stage and not a.bad_record:
        ap.error("name the stage bisected: --stage STAGE, or --bad-record RESULTS (its failed stage)")
    return Options(ws=dataclasses.replace(ws, matrix=a.matrix), env=dict(env), cell=checked_name(a.cell, "cell id"),
                   good=a.good, bad=a.bad, stage=a.stage, failure_class=a.failure_class, good_record=a.good_record,
                   bad_record=a.bad_record, budget=a.budget, resolve=not a.no_resolve, dry_run=a.dry_run)


def run(options: Options) -> int:
    from ..bisect import plan, search

    good_record, bad_record = _records(options)
    good, bad = _sides(options)
    check = _check(options, good)
    made = plan.make_plan(good, bad, check, checked=_how_checked(options, check), budget=options.budget)
    for line in made.lines():
        log.console.print(line, markup=False, highlight=False)
    if options.dry_run or not made.groups:
        return 0
    target = _target(options, bad_record)
    log.info(f"bisecting the failure at {target.stage}" + (f" ({target.failure_class})" if target.failure_class
                                                            else ""))
    result = search.bisect(made.groups, good.pins, _step_build(options, made, target), target, check=check,
                           budget=made.budget)
    return _hand_back(options, made, target, result, (good_record, bad_record))


def _step_build(options: Options, made: Plan, target: Target) -> StepBuild:
    """The real step (bisect_step.py) for this cell (a step's tag a killed bisection left goes when a step starts:
    aside.built)."""
    from .. import matrix as matrix_mod
    from ..bisect.report import stages_upto
    from ..bisect_step import StepBuild
    from ..matrix.cells import buildable

    matrix = matrix_mod.load(options.ws.matrix, options.env)
    cell = buildable(matrix.cells, options.cell, where=str(options.ws.matrix), doing="a step cannot build it",
                     hint="`nox -s matrix -- --all` lists the cells; `--dry-run` needs none")
    return StepBuild(ws=options.ws, env=options.env, matrix=matrix, cell=cell, good=made.good, bad=made.bad,
                     changes=made.changes, stages=stages_upto(target.stage))


def _records(options: Options) -> tuple[Seen | None, Seen | None]:
    from ..bisect.records import read_record

    return tuple(read_record(p, options.cell) if p else None  # type: ignore[return-value]
                 for p in (options.good_record, options.bad_record))


def _sides(options: Options) -> tuple[Side, Side]:
    """Both sides; the cell's layer paths are looked up in the matrix only when a side is not one lock file."""
    from ..bisect.sources import read_side

    layers: tuple[str, ...] = ()
    if not (Path(options.good).is_file() and Path(options.bad).is_file()):
        layers = _layer_paths(options)
    return (read_side(options.good, layers, options.ws.root), read_side(options.bad, layers, options.ws.root))


def _layer_paths(options: Options) -> tuple[str, ...]:
    from .. import matrix as matrix_mod
    from ..lock import paths_for

    matrix = matrix_mod.load(options.ws.matrix, options.env)
    cell = next((c for c in matrix.cells if c.id == options.cell), None)
    if cell is None:
        msg = f"{options.cell} is no cell of {options.ws.matrix}"
        raise SelectionError(msg, hint="`nox -s matrix -- --all` lists the cell ids; or give two lock files")
    paths = paths_for(cell, options.ws.locks)
    return tuple(p.relative_to(options.ws.locks).as_posix() for p in (paths.lane, paths.sglang, paths.toolkit) if p)


def _check(options: Options, good: Side) -> ResolverCheck | None:
    from ..bisect.groups import UvCheck

    if not options.resolve:
        return None
    return UvCheck.from_header(good.header("python"), good.header("platform"), good.header("index"), options.env)


def _how_checked(options: Options, check: ResolverCheck | None) -> str:
    if check is not None:
        return "checked with `uv pip compile`, as `nox -s lock` resolves"
    if not options.resolve:
        return "not checked: --no-resolve, each change alone"
    return "not checked: the good lock names no python and platform, each change alone"


def _target(options: Options, bad_record: Seen | None) -> Target:
    from ..bisect.records import target_of
    from ..bisect.search import Target

    if options.stage:
        return Target(options.stage, options.failure_class)
    assert bad_record is not None, "parse asks for --stage or --bad-record"
    return target_of(bad_record)


def _hand_back(options: Options, made: Plan, target: Target, result: Result,
               records: tuple[Seen | None, Seen | None]) -> int:
    """The hand-back written to runs/bisect-CELL/bisect.md, its culprit said; a bisection that confirmed none
    ends with an error naming the file."""
    from .. import disk
    from ..bisect.report import Handback, culprit_changes, markdown

    handback = Handback(cell=options.cell, good=made.good, bad=made.bad, target=target, result=result,
                        good_record=records[0], bad_record=records[1])
    path = options.ws.runs / f"bisect-{options.cell}" / "bisect.md"
    disk.write_text(path, markdown(handback))
    for change in culprit_changes(result):
        log.console.print(f"culprit: {change.line()}", markup=False, highlight=False)
    log.info(f"{result.builds} of {result.budget} builds; the hand-back: {options.ws.shown(path)}")
    if not result.confirmed:
        msg = f"no culprit was confirmed for {options.cell} ({result.builds} builds)"
        raise BisectError(msg, hint=f"read {options.ws.shown(path)}: its steps and notes say why")
    return 0
