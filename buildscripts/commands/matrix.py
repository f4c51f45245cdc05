"""`nox -s matrix`: the selected cell ids, one per line (or JSON), like cibuildwheel's
--print-build-identifiers. `--all` adds excluded cells with their reasons; `--github` prints the
verify jobs of the CI workflow (one per cell, or per cell and arch, with its runner labels: matrix/cijobs.py), and
with `--staged RESULTS` the verify jobs of what a build staged: the same rows, each with the
`image` to verify by digest (`REPO@sha256:…`). `--builds` prints the build jobs (one per build runner, with
the cells each builds), `--build-runner` the build and promote jobs' labels.

Opt-in cells are treated as `nox -s build` treats them: `--github` and `--builds` list them only when an
`--only` glob names them; with `--staged` every staged cell gets its jobs (the build made the selection)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .. import arguments, log
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..matrix import Cell

ABOUT = "list the selected cell ids (--json for machines)"
Output = Literal["ids", "table", "json", "github", "builds", "build-runner"]


@dataclass(frozen=True, kw_only=True)
class Options:
    matrix: Path
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    all: bool = False                   # excluded cells too, with the reason
    output: Output = "ids"
    staged: tuple[Path, ...] = ()       # with output "github": the results files of a staging build


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    del env  # nothing here reads the environment
    ap = argparse.ArgumentParser(prog="nox -s matrix --", description="List the selected cells.")
    arguments.add_matrix(ap, ws)
    arguments.add_selection(ap, what="cell ids to list", skip=True)
    ap.add_argument("--all", action="store_true", help="also list excluded cells, with the reason")
    output = ap.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output")
    output.add_argument("--github", action="store_true",
                        help="the GitHub Actions job matrix, one compact JSON line ({\"include\": [...]})")
    output.add_argument("--builds", action="store_true",
                        help="the CI build jobs (one per build runner, each with its cells), one compact JSON line")
    output.add_argument("--build-runner", action="store_true",
                        help="the labels of the CI build job's runner (runners.build), one compact JSON line")
    ap.add_argument("--staged", type=arguments.path_argument, metavar="RESULTS", action="append", default=[],
                    help="with --github: the verify jobs of the cells RESULTS staged (`build --stage REPO`), "
                         "each with the image to verify by digest (repeatable: one file per build job)")
    a = ap.parse_args(list(argv))
    if (a.github or a.builds) and a.all:
        ap.error(f"--{'github' if a.github else 'builds'} lists the jobs of buildable cells only; drop --all")
    if a.staged and not a.github:
        ap.error("--staged goes with --github: it lists the verify jobs of a staging build")
    chosen: Output = ("github" if a.github else "builds" if a.builds else "build-runner" if a.build_runner
                      else "json" if a.json else "table" if a.all else "ids")
    return Options(matrix=a.matrix, only=tuple(a.only), skip=tuple(a.skip), all=a.all, output=chosen,
                   staged=tuple(a.staged))


def run(options: Options) -> int:
    from ..matrix import load, select
    from ..matrix.cijobs import build_jobs, github_jobs, staged_jobs

    matrix = load(options.matrix)
    if options.output == "build-runner":
        print(json.dumps(list(matrix.spec.runners.build), separators=(",", ":")))
        return 0
    cells = select(matrix.cells, options.only, options.skip, include_excluded=options.all,
                   include_opt_in=options.all or bool(options.staged))
    if options.output in ("github", "builds"):
        jobs = (build_jobs(cells, matrix.spec.runners) if options.output == "builds"
                else github_jobs(cells, matrix.spec.runners))
        if options.staged:
            jobs = staged_jobs(jobs, list(options.staged), matrix)
        # Compact, one line: the workflow writes it to $GITHUB_OUTPUT as `matrix=...`.
        print(json.dumps({"include": jobs}, separators=(",", ":")))
    elif options.output == "json":
        rows = [{**c.axes(), "id": c.id, "excluded": c.excluded, "opt_in": c.opt_in,
                 "expected_failure": c.expected.model_dump(by_alias=True) if c.expected else None} for c in cells]
        print(json.dumps(rows, indent=2))
    elif options.output == "table":
        _table(cells, options.matrix)
    else:
        for cell in cells:
            print(cell.id)
    return 0


def _table(cells: Sequence[Cell], path: Path) -> None:
    """Every cell with its status: buildable, excluded (why), opt-in, expected to fail."""
    from rich.markup import escape
    from rich.table import Table

    table = Table("cell", "status", title=f"{len(cells)} cell(s) from {escape(path.name)}")
    for cell in cells:
        status = f"[yellow]excluded:[/] {escape(cell.excluded)}" if cell.excluded else "[green]buildable[/]"
        if cell.opt_in and not cell.excluded:
            status += f" [cyan]opt-in (--only):[/] {escape(cell.opt_in)}"
        if cell.expected and not cell.excluded:
            status += f" [dim](expected to fail at {escape(' or '.join(cell.expected.stages))})[/]"
        table.add_row(escape(cell.id), status)
    log.console.print(table)
