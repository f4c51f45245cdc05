"""What a run prints at its end: a summary that fits a screen, the full text left to the reports.

One line per cell that was built or verified (its verdict, the failing stage and class, its time, what was
reused), the excluded cells counted in one line with where to read why, the warnings grouped by kind with
counts, and for a build the outcome and what its exit code means. A line longer than the terminal breaks
between words, never inside a cell id or a stage name; `--verbose` (the `report` command) adds every
reason and warning in full, as every report file has them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.text import Text

from .. import log
from ..errors import RunFailed
from ..results import CellResult, StageResult, Status, Verdict, is_unexpected
from ..results.notes import warnings
from . import bygpu, common, grid
from .weigh import Weighed

STYLE = {
    Verdict.VERIFIED: "bold green", Verdict.CPU_CHECKED: "green", Verdict.FAILED: "bold red",
    Verdict.UNEXPECTED_PASS: "bold red", Verdict.EXPECTED_FAILURE: "yellow", Verdict.INCOMPATIBLE: "dim",
}
SYMBOL = {Verdict.VERIFIED: "✓", Verdict.CPU_CHECKED: "✓", Verdict.FAILED: "✕", Verdict.UNEXPECTED_PASS: "!",
          Verdict.EXPECTED_FAILURE: "~", Verdict.BUILT: "·", Verdict.SKIPPED: "–"}
INDENT = "    "


def cell_line(cell: CellResult, weighed: Weighed) -> list[str]:
    """The words of one cell's line: symbol, id, verdict (with its marks), failing stage and class, time, reuse."""
    shown = common.shown(cell, weighed)
    words = [SYMBOL.get(shown.verdict, "?") if not shown.claimed else "?", cell.cell_id, shown.word]
    if shown.marks:
        words.append(f"({', '.join(dict.fromkeys(m.value for m, _ in shown.marks))})")
    failed = cell.first_failure()
    if failed is not None:
        words.append(f"at {failed.name}" + (f" ({failed.failure_class})" if failed.failure_class else ""))
    elif cell.build is not None and cell.build.status is Status.FAILED:
        words.append("at build")
    seconds = (cell.build.duration_s if cell.build else 0.0) + sum(s.duration_s for s in cell.stages)
    words.append(f"{seconds:.0f} s")
    if cell.build is not None and cell.build.cached:
        words.append("build cached")
    if cell.reused_from:
        words.append(f"verification reused from {cell.reused_from}")
    return words


def verification_step(stages: Sequence[StageResult], verdict: Verdict | None = None) -> tuple[str, str]:
    """A cell's verification as one progress line (its status and detail), not a line per stage: how many stages
    passed, the failed ones by class, the aborted and skipped ones with the first reason given (the GPU stages of a
    runner without a GPU all say the same). Every stage's own line is in the reports. A cell matrix.yaml declares
    to fail reads as its judged verdict: `expected` where it failed as declared (not an error of the run, as
    pytest's xfail), `unexpected` where it passed."""
    by_status = {status: [s for s in stages if s.status is status] for status in Status}
    parts = ["under emulation"] if any("under emulation" in s.where for s in stages) else []   # verify/emulated.py
    if by_status[Status.PASSED]:
        parts.append(f"{len(by_status[Status.PASSED])} passed")
    if by_status[Status.FAILED]:
        classes: dict[str, list[str]] = {}
        for stage in by_status[Status.FAILED]:
            classes.setdefault(stage.failure_class or stage.reason or "no class", []).append(stage.name)
        parts.append(f"{len(by_status[Status.FAILED])} failed: " +
                     "; ".join(f"{', '.join(names)} ({why})" for why, names in classes.items()))
    for status in (Status.ABORTED, Status.SKIPPED):
        if by_status[status]:
            first = by_status[status][0]
            parts.append(f"{len(by_status[status])} {status.value} from {first.name}" +
                         (f" ({first.reason})" if first.reason else ""))
    status = Status.FAILED if by_status[Status.FAILED] else Status.PASSED if by_status[Status.PASSED] \
        else Status.SKIPPED
    if verdict is Verdict.EXPECTED_FAILURE:
        return "expected", "failed as declared: " + ", ".join(parts)
    if verdict is Verdict.UNEXPECTED_PASS:
        return "unexpected", "declared to fail, but it passed: " + ", ".join(parts)
    return status.value, ", ".join(parts)

def fit(words: Sequence[str], width: int, indent: str = INDENT) -> list[str]:
    """`words` joined by spaces into lines of at most `width` characters where they fit, each later line indented;
    a word is never split (one longer than a line gets a line of its own)."""
    lines: list[str] = []
    line = ""
    for word in words:
        candidate = f"{line} {word}" if line else (indent if lines else "") + word
        if line and len(candidate) > width:
            lines.append(line)
            line = indent + word
        else:
            line = candidate
    return [*lines, line] if line else lines


def excluded_line(cells: Iterable[CellResult]) -> str | None:
    """The excluded cells in one line: how many, grouped by why (an exact pin said once), where to read more."""
    pinned = "where the SGLang release pins another torch"
    why = Counter(pinned if grid.PIN.match(c.excluded or "") else (c.excluded or "") for c in cells if c.excluded)
    if not why:
        return None
    parts = ", ".join(f"{n} {reason.split(':')[0]}" for reason, n in why.most_common())
    return (f"{sum(why.values())} cell(s) excluded ({parts}): why in the reports (compat.md) or "
            "`nox -s matrix -- --all`")


def warning_kinds(cells: Iterable[CellResult]) -> list[str]:
    """One line per kind of warning (its stage and the text up to the first ':' or ';'), with counts."""
    notes: Counter[str] = Counter()
    where: dict[str, set[str]] = {}
    for cell in cells:
        for stage, text in warnings(cell):
            kind = f"{stage}: {re.split(r'[:;]', common.plain(text), maxsplit=1)[0].strip()}"
            notes[kind] += 1
            where.setdefault(kind, set()).add(cell.cell_id)
    return [f"{kind} ({n}× in {len(where[kind])} cell(s))" for kind, n in notes.most_common()]


def outcome_line(weighed: Weighed) -> str:
    """What the build's exit code will be, and why."""
    unexpected = [c for c in weighed.run.cells if is_unexpected(common.shown(c, weighed).verdict)]
    if unexpected:
        return (f"outcome: {len(unexpected)} cell(s) ended unexpectedly: exit {RunFailed.exit_code} (an outcome "
                "not declared in matrix.yaml's expect:, or an expected failure that passed)")
    return "outcome: every cell as declared: exit 0"


def summary(weighed: Weighed, console: Console | None = None, *, build: bool = True, verbose: bool = False) -> None:
    """Print the summary (NO_COLOR and non-TTY output are handled by rich)."""
    out = console or log.console
    width = max(out.width, 40)
    run = weighed.run
    cells = common.sort_cells(run.cells)
    shown = [c for c in cells if not c.excluded]
    head = common.plain(f"run {run.run_id}: {len(shown)} cell(s) built or verified, {len(cells) - len(shown)} excluded")
    for line in fit(head.split(" "), width):
        out.print(Text(line, style="bold"), soft_wrap=True)
    for cell in shown:
        style = STYLE.get(common.shown(cell, weighed).verdict, "")
        for line in fit([common.plain(w) for w in cell_line(cell, weighed)], width):
            out.print(Text(line, style=style), soft_wrap=True)
    lines = [excluded_line(cells)]
    kinds = warning_kinds(cells)
    if kinds:
        lines.append(f"warnings, {len(kinds)} kind(s), each in full in the reports"
                     + ("" if verbose else " (or with --verbose)") + ":")
    for line in filter(None, lines):
        for part in fit(line.split(" "), width):
            out.print(Text(part), soft_wrap=True)
    for kind in kinds:
        for part in fit(kind.split(" "), width - 2, INDENT):
            out.print(Text("  " + part, style="yellow"), soft_wrap=True)
    for row in bygpu.rows(weighed):
        products = ", ".join(row.products) or "no product of this platform"
        answer = row.answer   # the answer first: what to pull for that GPU and how far it was verified there
        said = f"{answer.label}: {answer.tag}" + (f" (check: {answer.check})" if answer.check else "") \
            if answer.cell_id else row.summary()
        for part in fit(f"{row.arch} on {row.platform} ({products}): {said}".split(" "), width):
            out.print(Text(part), soft_wrap=True)
    if verbose:
        for cell in cells:
            hint = next((s.hint for s in cell.stages if s.hint), None)
            line = f"{cell.cell_id}: {common.shown(cell, weighed).why}" + (f" (hint: {hint})" if hint else "")
            out.print(Text(common.plain(line), style="dim"))
    if build:
        for part in fit(outcome_line(weighed).split(" "), width):
            out.print(Text(part, style="bold"), soft_wrap=True)
