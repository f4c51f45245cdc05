"""The compatibility table in Markdown: the README shows it between two markers.

`update_readme` rewrites only what lies between `<!-- compat-table:start -->` and
`<!-- compat-table:end -->`; the README is never edited by hand there (`nox -s report` does it).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..results import RunResults
from . import common

START = "<!-- compat-table:start -->"
END = "<!-- compat-table:end -->"


def _cell_text(text: str) -> str:
    """Table-safe: no pipes or newlines, no HTML."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


def table(run: RunResults) -> str:
    columns = common.stage_columns(run)
    head = ["cell", *columns, "verdict", "GPU stages ran on"]
    align = [":--", *([":-:"] * len(columns)), ":--", ":--"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    notes: list[str] = []
    for cell in common.sort_cells(run.cells):
        verdict, why = common.verdict_of(cell)
        marks = [common.mark(common.outcome(cell, c)[0]) for c in columns]
        icon = common.VERDICT_ICONS.get(verdict, "")
        row = [f"`{cell.cell_id}`", *marks, f"{icon} {verdict.value}", _cell_text(common.gpu_summary(cell))]
        lines.append("| " + " | ".join(row) + " |")
        notes.append(f"- `{cell.cell_id}`: {_cell_text(why)}")
    when = run.finished or run.started
    return "\n".join([
        *lines, "", common.LEGEND, "",
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
        raise ConfigError(msg, hint="pass --readme PATH, or --no-readme") from None
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
