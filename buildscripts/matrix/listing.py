"""`nox -s matrix`: the selected cell ids, one per line (or JSON), like cibuildwheel's
--print-build-identifiers. `--all` adds excluded cells with their reasons."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence

from rich.markup import escape
from rich.table import Table

from .. import log
from ..workspace import Workspace, path_argument
from .cells import select
from .load import load


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws = ws or Workspace.at()
    del env  # nothing here reads the environment
    ap = argparse.ArgumentParser(prog="nox -s matrix --", description="List the selected cells.")
    ap.add_argument("--matrix", type=path_argument, default=ws.matrix)
    ap.add_argument("--only", action="append", default=[], metavar="GLOB")
    ap.add_argument("--skip", action="append", default=[], metavar="GLOB")
    ap.add_argument("--all", action="store_true", help="also list excluded cells, with the reason")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    a = ap.parse_args(list(argv))
    spec = load(a.matrix)
    cells = select(spec.cells, a.only, a.skip, include_excluded=a.all)
    if a.json:
        rows = [{**c.axes(), "id": c.id, "excluded": c.excluded,
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
        if cell.expected and not cell.excluded:
            status += f" [dim](expected to fail at {escape(' or '.join(cell.expected.stages))})[/]"
        table.add_row(escape(cell.id), status)
    log.console.print(table)
    return 0
