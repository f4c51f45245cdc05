"""`nox -s matrix`: the selected cell ids, one per line (or JSON), like cibuildwheel's
--print-build-identifiers. `--all` adds excluded cells with their reasons; `--github` prints the
verify jobs of the CI workflow (one per cell, or per cell and arch, with its runner labels: cijobs.py), and
with `--staged RESULTS` the verify jobs of what a build staged: the same rows, each with the
`image` to verify by digest (`REPO@sha256:…`). `--builds` prints the build jobs (one per build runner, with
the cells each builds), `--build-runner` the build and promote jobs' labels.

Opt-in cells are treated as `nox -s build` treats them: `--github` and `--builds` list them only when an
`--only` glob names them; with `--staged` every staged cell gets its jobs (the build made the selection)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence

from rich.markup import escape
from rich.table import Table

from .. import arguments, log
from ..workspace import Workspace, path_argument
from .cells import select
from .cijobs import ANY_ARCH, build_jobs, github_jobs, staged_jobs
from .load import load

__all__ = ["ANY_ARCH", "github_jobs", "main"]


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws = ws or Workspace.at()
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
    ap.add_argument("--staged", type=path_argument, metavar="RESULTS", action="append", default=[],
                    help="with --github: the verify jobs of the cells RESULTS staged (`build --stage REPO`), "
                         "each with the image to verify by digest (repeatable: one file per build job)")
    a = ap.parse_args(list(argv))
    if (a.github or a.builds) and a.all:
        ap.error(f"--{'github' if a.github else 'builds'} lists the jobs of buildable cells only; drop --all")
    if a.staged and not a.github:
        ap.error("--staged goes with --github: it lists the verify jobs of a staging build")
    matrix = load(a.matrix)
    if a.build_runner:
        print(json.dumps(list(matrix.spec.runners.build), separators=(",", ":")))
        return 0
    cells = select(matrix.cells, a.only, a.skip, include_excluded=a.all, include_opt_in=a.all or bool(a.staged))
    if a.github or a.builds:
        jobs = build_jobs(cells, matrix.spec.runners) if a.builds else github_jobs(cells, matrix.spec.runners)
        if a.staged:
            jobs = staged_jobs(jobs, a.staged, matrix)
        # Compact, one line: the workflow writes it to $GITHUB_OUTPUT as `matrix=...`.
        print(json.dumps({"include": jobs}, separators=(",", ":")))
        return 0
    if a.json:
        rows = [{**c.axes(), "id": c.id, "excluded": c.excluded, "opt_in": c.opt_in,
                 "expected_failure": c.expected.model_dump(by_alias=True) if c.expected else None} for c in cells]
        print(json.dumps(rows, indent=2))
        return 0
    if not a.all:
        for cell in cells:
            print(cell.id)
        return 0
    table = Table("cell", "status", title=f"{len(cells)} cell(s) from {escape(a.matrix.name)}")
    for cell in cells:
        status = f"[yellow]excluded:[/] {escape(cell.excluded)}" if cell.excluded else "[green]buildable[/]"
        if cell.opt_in and not cell.excluded:
            status += f" [cyan]opt-in (--only):[/] {escape(cell.opt_in)}"
        if cell.expected and not cell.excluded:
            status += f" [dim](expected to fail at {escape(' or '.join(cell.expected.stages))})[/]"
        table.add_row(escape(cell.id), status)
    log.console.print(table)
    return 0
