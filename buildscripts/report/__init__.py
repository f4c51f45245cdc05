"""Reports rendered from saved results (never recomputed by hand): console, Markdown, HTML, JUnit, JSON.

`python -m buildscripts report` (what `nox -s report` runs) merges the stored results of every
run and runner (newest per cell and stage wins), writes every format under `reports/`, rewrites
the README's compatibility table and prints the console table.
"""

from __future__ import annotations

import argparse
import glob
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import log
from ..errors import ResultsError
from ..results import RunResults
from ..workspace import Workspace
from . import console, github, html, junit, markdown, merge, sizes

__all__ = ["console", "main", "render_all"]


def render_all(run: RunResults, out_dir: Path, env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Write every format into `out_dir`; return {format: path}. Adds the GitHub step summary when set."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "json": (out_dir / "results.json", run.model_dump_json(indent=2) + "\n"),
        "schema": (out_dir / "results.schema.json",
                   json.dumps(RunResults.model_json_schema(), indent=2, sort_keys=True) + "\n"),
        "markdown": (out_dir / "compat.md", markdown.document(run)),
        "html": (out_dir / "compat.html", html.render(run)),
        "junit": (out_dir / "junit.xml", junit.render(run)),
        "sizes": (out_dir / "sizes.md", sizes.document(run)),
    }
    written: dict[str, Path] = {}
    for kind, (path, text) in files.items():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written[kind] = path
    summary = github.write_summary(run, env or {})
    if summary is not None:
        written["github"] = summary
    return written


def find_results(patterns: Sequence[str]) -> list[Path]:
    return sorted({Path(p) for pattern in patterns for p in glob.glob(pattern, recursive=True)})


def default_results(ws: Workspace) -> tuple[str, ...]:
    """Every run of this workspace, and the evidence committed from other machines."""
    return (str(ws.runs / "*" / "results.json"), str(ws.root / "evidence" / "**" / "results.json"))


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws = ws or Workspace.at()
    defaults = default_results(ws)
    parser = argparse.ArgumentParser(prog="report", description="render reports from saved results")
    parser.add_argument("--results", action="append", default=[], metavar="GLOB",
                        help="results files to merge (default: runs/*/results.json, evidence/**/results.json)")
    parser.add_argument("--out", type=Path, default=ws.root / "reports", help="output folder (default: reports/)")
    parser.add_argument("--readme", type=Path, default=ws.root / "README.md",
                        help="README whose compatibility table is rewritten (default: README.md)")
    parser.add_argument("--no-readme", action="store_true", help="leave the README alone")
    args = parser.parse_args(list(argv))
    paths = find_results(args.results or defaults)
    if not paths:
        msg = "no results files found (looked for " + ", ".join(args.results or defaults) + ")"
        raise ResultsError(msg, hint="run `nox -s build` first, or pass --results GLOB")
    run = merge.merge(merge.load_all(paths))
    written = render_all(run, args.out, env)
    if not args.no_readme and markdown.update_readme(args.readme, run):
        written["readme"] = args.readme
    console.summary(run)
    for kind, path in written.items():
        log.info(f"{kind}: {path}")
    return 0
