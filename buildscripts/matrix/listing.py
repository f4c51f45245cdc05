"""`nox -s matrix`: the selected cell ids, one per line (or JSON), like cibuildwheel's
--print-build-identifiers. `--all` adds excluded cells with their reasons; `--github` prints the
job matrix of the CI workflow (one job per cell, or per cell and arch, with its runner labels), and
with `--staged RESULTS` the verify jobs of what a build staged: the same rows, each with the
`image` to verify by digest (`REPO@sha256:…`). `--build-runner` prints the build job's labels."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from .. import arguments, log, results
from ..workspace import Workspace, path_argument
from .cells import Cell, select
from .load import load
from .schema import Runners

ANY_ARCH = "any"  # the `arch` of a job that runs on any runner with the default labels


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
    output.add_argument("--build-runner", action="store_true",
                        help="the labels of the CI build job's runner (runners.build), one compact JSON line")
    ap.add_argument("--staged", type=path_argument, metavar="RESULTS",
                    help="with --github: the verify jobs of the cells RESULTS staged (`build --stage REPO`), "
                         "each with the image to verify by digest")
    a = ap.parse_args(list(argv))
    if a.github and a.all:
        ap.error("--github lists the jobs of buildable cells only; drop --all")
    if a.staged and not a.github:
        ap.error("--staged goes with --github: it lists the verify jobs of a staging build")
    matrix = load(a.matrix)
    if a.build_runner:
        print(json.dumps(list(matrix.spec.runners.build), separators=(",", ":")))
        return 0
    cells = select(matrix.cells, a.only, a.skip, include_excluded=a.all, include_opt_in=a.all)
    if a.github:
        jobs = github_jobs(cells, matrix.spec.runners)
        if a.staged:
            jobs = staged_jobs(jobs, a.staged, results.matrix_digest(matrix.spec), a.matrix)
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


def github_jobs(cells: Sequence[Cell], runners: Runners) -> list[dict[str, object]]:
    """One job per cell on the default runners, or, when matrix.yaml gives per-arch runner labels,
    one job per cell and listed arch (in `archs:` order), so that each arch is verified on its GPU."""
    jobs: list[dict[str, object]] = []
    for cell in cells:
        if not runners.archs:
            jobs.append({"cell": cell.id, "arch": ANY_ARCH, "runs-on": list(runners.default), "name": cell.id})
            continue
        jobs.extend({"cell": cell.id, "arch": arch, "runs-on": list(runners.archs[arch]),
                     "name": f"{cell.id} on {arch}"} for arch in cell.archs if arch in runners.archs)
    return jobs


def staged_jobs(jobs: Sequence[dict[str, object]], path: Path, digest: str, matrix: Path) -> list[dict[str, object]]:
    """The jobs of the cells the results at `path` staged, each with `image`: `REPO@sha256:…` to verify.
    A cell that was not staged (it failed, or was expected to fail, a CPU stage) gets no GPU job."""
    run = results.load(path)
    warning = results.check_matrix(run, path, matrix, digest, allow_other=False)
    if warning:
        log.warn(warning)
    subjects = {c.cell_id: c.image.subject for c in run.cells if c.image.subject}
    return [{**job, "image": subjects[str(job["cell"])]} for job in jobs if str(job["cell"]) in subjects]
