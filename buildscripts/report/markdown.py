"""The compatibility table in Markdown: the README shows it between two markers.

`update_readme` rewrites only what lies between `<!-- compat-table:start -->` and
`<!-- compat-table:end -->`; the README is never edited by hand there (`nox -s report` does it).
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import disk
from ..errors import ConfigError
from ..results import CellResult, Verdict
from . import bygpu, common, grid, weigh
from .weigh import Weighed

START = "<!-- compat-table:start -->"
END = "<!-- compat-table:end -->"

# What text from the results may not carry into Markdown as it is: line breaks and other control characters
# (a row would end, a marker line could begin), table pipes, HTML (`<` opens a tag or a marker comment, `&`
# an entity), the backtick (it closes a code span) and the brackets of a link.
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": "&#96;", "|": "\\|", "[": "\\[", "]": "\\]",
             "\\": "\\\\"}
_UNSAFE = re.compile(r"[&<>`|\[\]\\]|[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_PLAIN_CODE = re.compile(r"[A-Za-z0-9._+@:/=-]+")  # what a code span shows as it is


def _cell_text(text: str) -> str:
    """Text from the results, safe in a table cell, a list item and the README: no line break or other
    control character (each becomes a space), no pipe, HTML, backtick or link bracket."""
    return _UNSAFE.sub(lambda m: _ENTITIES.get(m[0], " "), text)


def _code(text: str) -> str:
    """Text from the results as inline code: a backtick span when it is plain (a real cell id always is),
    else an HTML <code> element around the escaped text (a backtick span cannot escape anything)."""
    return f"`{text}`" if _PLAIN_CODE.fullmatch(text) else f"<code>{_cell_text(text)}</code>"


SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
NO_RESULT = "—"


def matrix_view(weighed: Weighed) -> list[str]:
    """The reachable grid: SGLang version and its torch lane down, toolkit across; excluded slots get a mark
    whose reason is listed under the table (Markdown has no hover); the exact pins said once."""
    view = grid.layout(weighed.run)
    if not view.slots:
        return []
    head = ["SGLang", "torch lane", *map(_cell_text, view.toolkits)]
    lines = [f"Compatibility matrix (base {_cell_text(view.base)}): each SGLang release with the torch lane it can "
             "run on, CUDA toolkit layers across; each cell shows its verdict, then the GPU archs its GPU stages "
             "ran on (✓ all passed there, ✕ one failed there).", "",
             "| " + " | ".join(head) + " |", "|:--|:--|" + "|".join([":-:"] * (len(head) - 2)) + "|"]
    excluded: dict[str, int] = {}
    empty = False
    for version, lane in view.rows:
        row = [f"**{_cell_text(version)}**", _cell_text(lane)]
        for toolkit in view.toolkits:
            cell = view.at(version, lane, toolkit)
            row.append(_slot(cell, excluded, weighed) if cell else NO_RESULT)
            empty = empty or cell is None
        lines.append("| " + " | ".join(row) + " |")
    pins = grid.pins_line(view)
    lines += ["", *([f"{NO_RESULT} no results for that combination.", ""] if empty else []),
              *([_cell_text(pins), ""] if pins else [])]
    lines += [f"- {str(n).translate(SUPERSCRIPT)} excluded: {_cell_text(why)}" for why, n in excluded.items()]
    return lines


def _slot(cell: CellResult, excluded: dict[str, int], weighed: Weighed) -> str:
    shown = common.shown(cell, weighed)
    if shown.verdict is Verdict.INCOMPATIBLE:
        number = excluded.setdefault(shown.reason, len(excluded) + 1)
        return f"{shown.label}{str(number).translate(SUPERSCRIPT)}"
    archs = grid.arch_line(cell, vouched=weighed.vouched(cell))
    return f"{shown.label}<br>{_cell_text(archs)}" if archs else shown.label


def gpu_view(weighed: Weighed) -> list[str]:
    """The view by GPU, one table per platform: per arch, what to pull, what was verified there (by digest, with the
    check command), what was only compiled and audited for it, and plainly where nothing ran yet."""
    lines: list[str] = []
    for platform, rows in bygpu.views(weighed):
        lines += [*([""] if lines else []), f"By GPU (images for {platform}): {bygpu.ABOUT}.", "",
                  "| " + " | ".join(bygpu.HEADINGS) + " |", "|:--|:--|:--|:--|:--|"]
        for row in rows:
            verified = "<br>".join(f"{_code(v.pull)}" + (f": {_code(v.check)}" if v.check else " (not pushed)")
                                   for v in row.verified)
            if not verified:
                verified = "nothing has run on this GPU yet" if row.nothing_ran else "nothing verified yet"
            ran = "<br>".join([*map(_code, row.ran), *(f"{_code(c)} (claimed, not vouched for)" for c in row.claimed)])
            compiled = "<br>".join(map(_code, row.compiled)) or "—"
            products = _cell_text(", ".join(row.products)) or "—"
            lines.append(f"| {row.arch} | {products} | {verified} | {ran or '—'} | {compiled} |")
    return lines


def other_runs(weighed: Weighed) -> list[str]:
    """Host-mode, LXC and other-base runs: one line each, with the same verdict and archs."""
    others = grid.layout(weighed.run).others
    if not others:
        return []
    lines = ["Other runs (host mode, in place in LXC, other bases):", ""]
    for cell in others:
        shown = common.shown(cell, weighed)
        archs = grid.arch_line(cell, vouched=weighed.vouched(cell))
        lines.append(f"- {_code(cell.cell_id)} ({_cell_text(grid.place(cell))}): {shown.label}"
                     + (f" {_cell_text(archs)}" if archs else "")
                     + f" — {_cell_text(shown.short)}")
    return lines


def stage_table(weighed: Weighed) -> list[str]:
    """Every cell, stage by stage (build, then the ladder), its verdict and where its GPU stages ran."""
    run = weighed.run
    columns = common.stage_columns(run)
    head = ["cell", *map(_cell_text, columns), "verdict", "GPU stages ran on"]
    align = [":--", *([":-:"] * len(columns)), ":--", ":--"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for cell in _reachable(weighed):
        marks = [common.mark(common.outcome(cell, c)[0]) for c in columns]
        gpus = common.gpu_summary(cell, vouched=weighed.vouched(cell))
        row = [_code(cell.cell_id), *marks, common.shown(cell, weighed).label, _cell_text(gpus)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _reachable(weighed: Weighed) -> list[CellResult]:
    """Every cell but those an exact pin rules out (said once under the grid)."""
    pinned = {c.cell_id for c in grid.layout(weighed.run).pinned}
    return [c for c in common.sort_cells(weighed.run.cells) if c.cell_id not in pinned]


def table(weighed: Weighed) -> str:
    """The matrix view, the other runs, then the stage-by-stage table with each verdict's reason."""
    run = weighed.run
    notes = [f"- {_code(cell.cell_id)}: {_cell_text(common.shown(cell, weighed).why)}" for cell in _reachable(weighed)]
    when = run.finished or run.started
    parts = [matrix_view(weighed), gpu_view(weighed), other_runs(weighed)]
    return "\n".join([
        *[line for part in parts if part for line in [*part, ""]],
        "Every cell, stage by stage:", "", *stage_table(weighed), "", common.LEGEND, "", weigh.LEGEND, "",
        "<details><summary>Why each cell got its verdict</summary>", "", *notes, "", "</details>", "",
        f"_Rendered from results of {_cell_text(run.run_id)} ({_cell_text(when)}) by `nox -s report`; do not edit._",
    ])


def document(weighed: Weighed) -> str:
    """A standalone page (reports/compat.md) with the same table."""
    return f"# Compatibility matrix\n\n{table(weighed)}\n"


def update_readme(readme: Path, weighed: Weighed) -> Path | None:
    """Replace the table between the markers; the file written when it changed, else None.

    Each marker must be there exactly once, start before end (ConfigError otherwise: with two of either, which
    pair holds the table is a guess). A README that is a symbolic link is written through (`disk.write_text`):
    the link stays, its target gets the table.
    """
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {readme}: {exc.strerror}"
        raise ConfigError(msg, hint="pass --readme PATH, or leave out --update-readme") from None
    counts = (text.count(START), text.count(END))
    start, end = text.find(START), text.find(END)
    if start < 0 or end < 0 or end < start:
        msg = f"{readme} has no compatibility-table markers ({START} ... {END}, in that order)"
        raise ConfigError(msg, hint="add both marker lines where the table belongs, then run `nox -s report`")
    if counts != (1, 1):
        msg = f"{readme} has {counts[0]} start and {counts[1]} end compatibility-table markers; it needs one of each"
        raise ConfigError(msg, hint="keep one marker line of each where the table belongs (delete what lies between "
                                    "extra ones), then run `nox -s report`")
    new = text[: start + len(START)] + "\n" + table(weighed) + "\n" + text[end:]
    if new == text:
        return None
    return disk.write_text(readme, new)
