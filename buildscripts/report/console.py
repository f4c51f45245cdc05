"""The table printed at the end of every run: cells × stages with ✓ ✕ – ·, verdict and where GPUs ran.

Reasons for everything that did not pass are listed under the table (one line per cell), so the
table stays narrow enough for a terminal.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import log
from ..results import RunResults, Verdict
from . import common

STYLE = {"passed": "green", "failed": "red", "skipped": "yellow", "aborted": "dim"}
VERDICT_STYLE = {
    Verdict.VERIFIED: "bold green", Verdict.CPU_CHECKED: "green", Verdict.FAILED: "bold red",
    Verdict.UNEXPECTED_PASS: "bold red", Verdict.EXPECTED_FAILURE: "yellow", Verdict.INCOMPATIBLE: "dim",
}
SHORT = {"arch-audit": "arch", "jit-compile": "jit", "gpu-visible": "gpu", "kernel-smoke": "kernel",
         "nccl-allreduce": "nccl", "first-generation": "gen", "toolchain": "tools"}


def table(run: RunResults, width: int = 200) -> Table:
    """One column per stage when `width` allows, else one ladder column (a mark per stage, in order)."""
    columns = common.stage_columns(run)
    wide = width >= 70 + 7 * len(columns)
    # Every text from the results goes in as Text, never as a markup string: a cell id, run id, stage or GPU
    # name with `[...]` in it (a GPU name comes from the image under test) is shown as it is, and a terminal
    # escape in it is shown, not obeyed (`common.plain`).
    grid = Table(title=Text(common.plain(f"Compatibility: {len(run.cells)} cell(s), run {run.run_id}")),
                 title_justify="left")
    grid.add_column("cell", overflow="fold")
    if wide:
        for name in columns:
            grid.add_column(Text(common.plain(SHORT.get(name, name))), justify="center")
    else:
        grid.add_column("stages", no_wrap=True)
    grid.add_column("verdict", no_wrap=True)
    grid.add_column("GPU stages ran on", overflow="fold")
    for cell in common.sort_cells(run.cells):
        verdict, _ = common.verdict_of(cell)
        marks = [Text(common.mark(s) or " ", style=STYLE.get(s, "")) for s, _ in
                 (common.outcome(cell, c) for c in columns)]
        stages = marks if wide else [Text("").join(marks)]
        word = Text(verdict.value, style=VERDICT_STYLE.get(verdict, ""))
        grid.add_row(Text(common.plain(cell.cell_id)), *stages, word, Text(common.plain(common.gpu_summary(cell))))
    grid.caption = Text(common.plain(common.LEGEND + ("" if wide else "\nstages, in order: " + ", ".join(columns))))
    return grid


def reasons(run: RunResults) -> list[str]:
    """One line per cell that did not verify: its verdict reason and the first non-passed stage's reason."""
    lines = []
    for cell in common.sort_cells(run.cells):
        verdict, why = common.verdict_of(cell)
        if verdict is Verdict.VERIFIED:
            continue
        hint = next((s.hint for s in cell.stages if s.hint), None)
        lines.append(f"{cell.cell_id}: {verdict.value}: {why}" + (f" (hint: {hint})" if hint else ""))
    return lines


def summary(run: RunResults, console: Console | None = None) -> None:
    """Print the table and the reasons (NO_COLOR and non-TTY output are handled by rich)."""
    out = console or log.console
    out.print(table(run, out.width))
    for line in reasons(run):
        out.print(Text("  " + common.plain(line), style="dim"))
