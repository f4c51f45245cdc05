"""The compatibility table in Markdown: the README shows it between two markers.

`update_readme` rewrites only what lies between `<!-- compat-table:start -->` and
`<!-- compat-table:end -->`; the README is never edited by hand there (`nox -s report` does it).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..results import CellResult, RunResults, Verdict
from . import common, grid

START = "<!-- compat-table:start -->"
END = "<!-- compat-table:end -->"


def _cell_text(text: str) -> str:
    """Table-safe: no pipes or newlines, no HTML."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
NO_RESULT = "—"


def matrix_view(run: RunResults) -> list[str]:
    """The compatibility matrix: SGLang versions down, torch lane × toolkit across; excluded slots get a
    mark whose reason is listed under the table (Markdown has no hover)."""
    view = grid.layout(run)
    if not view.slots:
        return []
    head = ["SGLang", *[f"{_cell_text(lane)}<br>{_cell_text(toolkit)}" for lane in view.lanes
                        for toolkit in view.toolkits]]
    lines = [f"Compatibility matrix (base {_cell_text(view.base)}): SGLang versions down, torch lane and CUDA "
             "toolkit across; each cell shows its verdict, then the GPU archs its GPU stages ran on "
             "(✓ all passed there, ✕ one failed there).", "",
             "| " + " | ".join(head) + " |", "|:--|" + "|".join([":-:"] * (len(head) - 1)) + "|"]
    excluded: dict[str, int] = {}
    empty = False
    for version in view.versions:
        row = [f"**{_cell_text(version)}**"]
        for lane in view.lanes:
            for toolkit in view.toolkits:
                cell = view.at(version, lane, toolkit)
                row.append(_slot(cell, excluded) if cell else NO_RESULT)
                empty = empty or cell is None
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *([f"{NO_RESULT} no results for that combination."] if empty else [])]
    lines += [f"- {str(n).translate(SUPERSCRIPT)} excluded: {_cell_text(why)}" for why, n in excluded.items()]
    return lines


def _slot(cell: CellResult, excluded: dict[str, int]) -> str:
    verdict, word = grid.slot_word(cell)
    if verdict is Verdict.INCOMPATIBLE:
        number = excluded.setdefault(common.verdict_of(cell)[1], len(excluded) + 1)
        return f"{word}{str(number).translate(SUPERSCRIPT)}"
    archs = grid.arch_line(cell)
    return f"{word}<br>{_cell_text(archs)}" if archs else word


def other_runs(run: RunResults) -> list[str]:
    """Host-mode, LXC and other-base runs: one line each, with the same verdict and archs."""
    others = grid.layout(run).others
    if not others:
        return []
    lines = ["Other runs (host mode, in place in LXC, other bases):", ""]
    for cell in others:
        _, word = grid.slot_word(cell)
        archs = grid.arch_line(cell)
        lines.append(f"- `{cell.cell_id}` ({grid.place(cell)}): {word}" + (f" {_cell_text(archs)}" if archs else "")
                     + f" — {_cell_text(common.verdict_of(cell)[1])}")
    return lines


def stage_table(run: RunResults) -> list[str]:
    """Every cell, stage by stage (build, then the ladder), its verdict and where its GPU stages ran."""
    columns = common.stage_columns(run)
    head = ["cell", *columns, "verdict", "GPU stages ran on"]
    align = [":--", *([":-:"] * len(columns)), ":--", ":--"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for cell in common.sort_cells(run.cells):
        verdict, _ = common.verdict_of(cell)
        marks = [common.mark(common.outcome(cell, c)[0]) for c in columns]
        icon = common.VERDICT_ICONS.get(verdict, "")
        row = [f"`{cell.cell_id}`", *marks, f"{icon} {verdict.value}", _cell_text(common.gpu_summary(cell))]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def table(run: RunResults) -> str:
    """The matrix view, the other runs, then the stage-by-stage table with each verdict's reason."""
    notes = [f"- `{cell.cell_id}`: {_cell_text(common.verdict_of(cell)[1])}" for cell in common.sort_cells(run.cells)]
    when = run.finished or run.started
    parts = [matrix_view(run), other_runs(run)]
    return "\n".join([
        *[line for part in parts if part for line in [*part, ""]],
        "Every cell, stage by stage:", "", *stage_table(run), "", common.LEGEND, "",
        "<details><summary>Why each cell got its verdict</summary>", "", *notes, "", "</details>", "",
        f"_Rendered from results of {_cell_text(run.run_id)} ({when}) by `nox -s report`; do not edit._",
    ])


def document(run: RunResults) -> str:
    """A standalone page (reports/compat.md) with the same table."""
    return f"# Compatibility matrix\n\n{table(run)}\n"


def update_readme(readme: Path, run: RunResults) -> bool:
    """Replace the table between the markers; True when the file changed. Missing markers: ConfigError."""
    try:
        text = readme.read_text()
    except OSError as exc:
        msg = f"cannot read {readme}: {exc.strerror}"
        raise ConfigError(msg, hint="pass --readme PATH, or leave out --update-readme") from None
    start, end = text.find(START), text.find(END)
    if start < 0 or end < 0 or end < start:
        msg = f"{readme} has no compatibility-table markers ({START} ... {END}, in that order)"
        raise ConfigError(msg, hint="add both marker lines where the table belongs, then run `nox -s report`")
    new = text[: start + len(START)] + "\n" + table(run) + "\n" + text[end:]
    if new == text:
        return False
    tmp = readme.with_suffix(readme.suffix + ".tmp")
    tmp.write_text(new)
    tmp.replace(readme)
    return True
