"""Reports rendered from saved results (never recomputed by hand): console, Markdown, HTML, JUnit, JSON.

`python -m buildscripts report` (what `nox -s report` runs: commands/report.py) weighs every record of the stored
results of every run and runner as the gate does (report/weigh.py: only what the gate would let through is shown as
verified), merges them (newest per cell, stage and GPU arch wins), writes every format under `reports/` and
prints the console summary. The README's compatibility table is tracked, so it is rewritten only when asked
(`--update-readme`), and then from the committed evidence (EVIDENCE_RESULTS) unless --results names the
files: a quick local run never dirties the checkout.

Results of another matrix.yaml are read like any other: each record counts while its own cell's definition is
unchanged (gate.py), so editing another cell takes nothing away; a record whose cell changed is shown marked
stale, with what changed, never as verified. A match of
the search that is not a regular file (a link to a device, a fifo, a folder) is skipped with a warning
naming it and why.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import disk, log, matrix
from ..errors import ConfigError
from ..results import RunResults
from ..trust.keys import PublicKey
from ..workspace import Workspace
from . import console, github, html, junit, markdown, merge, sizes, weigh
from .weigh import Weighed

__all__ = ["console", "render_all", "weigh"]

# What the README's table is rendered from: each evidence folder's results, and the runs under its runs/
# (each run's folder as `nox -s build` or `verify` writes it: runs/RUN_ID/results.json)
EVIDENCE_RESULTS = ("evidence/*/results.json", "evidence/*/runs/*/results.json")


def render_all(weighed: Weighed, out_dir: Path, env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Write every format into `out_dir`; return {format: path}. Adds the GitHub step summary when set.

    The set is written into a fresh folder beside `out_dir` and swapped in whole (`disk.replace_folder`): a
    report killed half-way, or two reports into one folder at once, leave one whole set there, never a mix of
    two runs' files. The step summary is appended after the swap (it is a log of the job, not part of the set).
    """
    run = weighed.run
    files = {
        "json": ("results.json", run.model_dump_json(indent=2) + "\n"),
        "schema": ("results.schema.json", schema_text()),
        "markdown": ("compat.md", markdown.document(weighed)),
        "html": ("compat.html", html.render(weighed)),
        "junit": ("junit.xml", junit.render(weighed)),
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
    summary = github.write_summary(weighed, env or {})
    if summary is not None:
        written["github"] = summary
    return written


@functools.cache
def schema_text() -> str:
    """The JSON Schema of results files, as written beside them: the same for every report of this version, so
    made once per process (pydantic builds it afresh on every call, which a process writing many sets paid)."""
    return json.dumps(RunResults.model_json_schema(), indent=2, sort_keys=True) + "\n"


def find_results(patterns: Sequence[str]) -> list[Path]:
    """The regular files `patterns` match (`disk.glob_files`: `**` never follows a link into a loop)."""
    return disk.glob_files(patterns)


def default_results(ws: Workspace) -> tuple[str, ...]:
    """Every run of this workspace, and the evidence committed from other machines."""
    return (str(ws.runs / "*" / "results.json"), *readme_results(ws))


def readme_results(ws: Workspace) -> tuple[str, ...]:
    """What the README's table is rendered from: the evidence committed with the project, not runs/."""
    return tuple(str(ws.root / pattern) for pattern in EVIDENCE_RESULTS)


def weighed_from(paths: Sequence[Path], matrix_path: Path | None, keys: Sequence[PublicKey]) -> Weighed:
    """The files read and weighed with `keys`, each record against its own cell's definition in matrix.yaml; with
    none (`matrix_path` None) every record is marked stale."""
    runs = merge.load_all(paths)
    return weigh.weigh_runs(runs, matrix.load(matrix_path) if matrix_path is not None else None, keys)


def check_destinations(out: Path, readme: Path | None) -> None:
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


def write_readme(readme: Path, weighed: Weighed) -> dict[str, Path]:
    """The README's block and docs/compatibility.md beside it, each written when it changed."""
    written: dict[str, Path] = {}
    try:
        written_to = markdown.update_readme(readme, weighed)
    except UnicodeDecodeError:
        msg = f"{readme} is not UTF-8 text"
        hint = "pass --readme PATH of the project's README.md, or leave out --update-readme"
        raise ConfigError(msg, hint=hint) from None
    except OSError as exc:
        msg = f"cannot write the table into {readme}: {exc.strerror} ({exc.filename})"
        hint = "pass --readme PATH of a file you can write, or leave out --update-readme"
        raise ConfigError(msg, hint=hint) from None
    try:
        details = markdown.update_details(readme, weighed)
    except OSError as exc:
        msg = f"cannot write {markdown.DETAILS} beside {readme}: {exc.strerror} ({exc.filename})"
        raise ConfigError(msg, hint="make the docs/ folder beside the README writable") from None
    if details is not None:
        written["details"] = details
    if written_to is not None:
        written["readme"] = written_to
        if written_to != readme:
            log.info(f"{readme} is a symbolic link: the table was written into its target, the link kept")
    return written
