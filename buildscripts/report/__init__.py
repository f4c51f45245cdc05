"""Reports rendered from saved results (never recomputed by hand): console, Markdown, HTML, JUnit, JSON.

`python -m buildscripts report` (what `nox -s report` runs) merges the stored results of every
run and runner (newest per cell, stage and GPU arch wins), writes every format under `reports/` and
prints the console table. The README's compatibility table is tracked, so it is rewritten only when asked
(`--update-readme`), and then from the committed evidence (evidence/*/results.json) unless --results
names the files: a quick local run never dirties the checkout.

Results of another matrix.yaml (their recorded digest differs from the current file's) are refused
when named with --results; when found by the default search (runs/, evidence/: history that outlives
edits of matrix.yaml) they are left out with a warning. `--allow-other-matrix` takes them anyway.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import arguments, disk, log, matrix, results
from ..errors import ConfigError, ResultsError
from ..results import RunResults
from ..workspace import Workspace, path_argument
from . import console, github, html, junit, markdown, merge, sizes

__all__ = ["console", "main", "render_all"]


def render_all(run: RunResults, out_dir: Path, env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Write every format into `out_dir`; return {format: path}. Adds the GitHub step summary when set.

    The set is written into a fresh folder beside `out_dir` and swapped in whole (`disk.replace_folder`): a
    report killed half-way, or two reports into one folder at once, leave one whole set there, never a mix of
    two runs' files. The step summary is appended after the swap (it is a log of the job, not part of the set).
    """
    files = {
        "json": ("results.json", run.model_dump_json(indent=2) + "\n"),
        "schema": ("results.schema.json", schema_text()),
        "markdown": ("compat.md", markdown.document(run)),
        "html": ("compat.html", html.render(run)),
        "junit": ("junit.xml", junit.render(run)),
        "sizes": ("sizes.md", sizes.document(run)),
    }
    fresh = disk.new_folder(out_dir)
    try:
        for name, text in files.values():
            with (fresh / name).open("w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        out_dir = disk.replace_folder(fresh, out_dir)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    written = {kind: out_dir / name for kind, (name, _) in files.items()}
    summary = github.write_summary(run, env or {})
    if summary is not None:
        written["github"] = summary
    return written


@functools.cache
def schema_text() -> str:
    """The JSON Schema of results files, as written beside them: the same for every report of this version, so
    made once per process (pydantic builds it afresh on every call, which a process writing many sets paid)."""
    return json.dumps(RunResults.model_json_schema(), indent=2, sort_keys=True) + "\n"


def find_results(patterns: Sequence[str]) -> list[Path]:
    return disk.glob_files(patterns)


def default_results(ws: Workspace) -> tuple[str, ...]:
    """Every run of this workspace, and the evidence committed from other machines."""
    return (str(ws.runs / "*" / "results.json"), str(ws.root / "evidence" / "**" / "results.json"))


def readme_results(ws: Workspace) -> tuple[str, ...]:
    """What the README's table is rendered from: the evidence committed with the project, not runs/."""
    return (str(ws.root / "evidence" / "*" / "results.json"),)


def of_this_matrix(runs: Mapping[Path, RunResults], matrix_path: Path, *, explicit_matrix: bool,
                   explicit_results: bool, allow_other: bool) -> list[RunResults]:
    """The runs made from `matrix_path`'s matrix (see the module docstring for what happens to others)."""
    if not explicit_matrix and not matrix_path.is_file():
        log.warn(f"no {matrix_path}: the results are not checked against a matrix.yaml (pass --matrix PATH)")
        return list(runs.values())
    digest = results.matrix_digest(matrix.load(matrix_path).spec)
    kept = []
    for path, run in runs.items():
        try:
            warning = results.check_matrix(run, path, matrix_path, digest, allow_other=allow_other)
        except ResultsError as exc:
            if explicit_results:
                raise
            log.warn(f"{exc.message}: left out")
            continue
        if warning:
            log.warn(warning)
        kept.append(run)
    if not kept:
        msg = f"every results file found was made from another matrix.yaml than {matrix_path}"
        raise ResultsError(msg, hint="run `nox -s build` with this matrix, pass --matrix with theirs, "
                                     "or --allow-other-matrix")
    return kept


def _check_destinations(out: Path, readme: Path | None) -> None:
    """Where reports go must be a folder and the README a file, both writable: said before anything is read."""
    disk.check_writable(out, "--out", "pass --out DIR of a folder you can write: every report format goes there",
                        folder=True)
    if readme is None:
        return
    try:
        odd = readme.exists() and not disk.target_of(readme).is_file()
    except OSError as exc:  # e.g. a name longer than the file system allows
        msg = f"cannot use --readme {readme}: {exc.strerror}"
        raise ConfigError(msg, hint="pass --readme PATH of a Markdown file, or leave out --update-readme") from None
    if odd:
        msg = f"--readme {readme} is not a regular file"
        raise ConfigError(msg, hint="pass --readme PATH of a Markdown file, or leave out --update-readme")
    disk.check_writable(readme, "--readme", "pass --readme PATH of a file you can write, or leave out --update-readme")


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    ws = ws or Workspace.at()
    parser = argparse.ArgumentParser(prog="report", description="render reports from saved results")
    arguments.add_results(parser, default="runs/*/results.json and evidence/**/results.json, merged; "
                                          "with --update-readme: evidence/*/results.json")
    parser.add_argument("--out", type=path_argument, default=ws.root / "reports",
                        help="output folder (default: reports/)")
    parser.add_argument("--update-readme", action="store_true",
                        help="also rewrite the README's compatibility table (from the committed evidence "
                             "unless --results is given)")
    parser.add_argument("--readme", type=path_argument, default=None, metavar="PATH",
                        help="the README --update-readme rewrites (default: README.md); naming one implies "
                             "--update-readme")
    parser.add_argument("--no-readme", action="store_true",
                        help="leave the README alone (the default; refused with --update-readme or --readme)")
    arguments.add_matrix(parser, None, help="the matrix.yaml the results must come from (default: matrix.yaml)")
    arguments.add_allow_other_matrix(parser, help="merge results made from another matrix.yaml too (with a warning)")
    args = parser.parse_args(list(argv))
    update_readme = args.update_readme or args.readme is not None
    if update_readme and args.no_readme:
        parser.error("--no-readme contradicts --update-readme / --readme: pass one or the other")
    readme: Path | None = (args.readme or ws.root / "README.md") if update_readme else None
    defaults = readme_results(ws) if update_readme else default_results(ws)
    _check_destinations(args.out, readme)
    github.check(env or {})
    paths = arguments.results_files(args.results) if args.results else find_results(defaults)
    if not paths:
        msg = "no results files found (looked for " + ", ".join(defaults) + ")"
        raise ResultsError(msg, hint="run `nox -s build` first, or pass --results GLOB")
    loaded = of_this_matrix(dict(zip(paths, merge.load_all(paths), strict=True)), args.matrix or ws.matrix,
                            explicit_matrix=args.matrix is not None, explicit_results=bool(args.results),
                            allow_other=args.allow_other_matrix)
    run = merge.merge(loaded)
    try:
        written = render_all(run, args.out, env)
    except OSError as exc:  # e.g. a parent of --out is a file, or not writable
        msg = f"cannot write the reports into {args.out}: {exc.strerror} ({exc.filename})"
        raise ConfigError(msg, hint="pass --out DIR of a folder you can write") from None
    try:
        written_to = markdown.update_readme(readme, run) if readme is not None else None
    except UnicodeDecodeError:
        msg = f"{readme} is not UTF-8 text"
        hint = "pass --readme PATH of the project's README.md, or leave out --update-readme"
        raise ConfigError(msg, hint=hint) from None
    except OSError as exc:
        msg = f"cannot write the table into {readme}: {exc.strerror} ({exc.filename})"
        hint = "pass --readme PATH of a file you can write, or leave out --update-readme"
        raise ConfigError(msg, hint=hint) from None
    if written_to is not None:
        written["readme"] = written_to
        if written_to != readme:
            log.info(f"{readme} is a symbolic link: the table was written into its target, the link kept")
    console.summary(run)
    for kind, path in written.items():
        log.info(f"{kind}: {path}")
    return 0
