"""The compatibility-matrix view of the HTML page (layout from `grid`): verdict and archs per slot,
excluded slots greyed with their reason on hover, the other runs listed under it.

A slot carries the index of its cell's row in the stage-by-stage table below, so that a click
opens that row's drill-down (the page's script does it).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..results import CellResult, RunResults, Verdict
from . import common, grid, html_marks

CSS = """
#compat{margin-bottom:.6rem}#compat th{background:#f2f4f7;font-size:.8rem}#compat th.lane{text-align:center}
#compat th[scope=row]{text-align:right}
#compat td.slot{text-align:center;min-width:7.5rem;cursor:pointer}#compat td.slot:hover{outline:2px solid #4a7fd4}
#compat td.excluded,#compat td.empty{background:#f0f1f3;color:#8c959f;cursor:help}
#compat .archs{font-size:.78rem;font-family:ui-monospace,monospace;color:#1d2228}
td.slot-verified{background:#dafbe1}td.slot-failed,td.slot-unexpected-pass{background:#ffebe9}
td.slot-expected-failure{background:#fff8c5}td.slot-cpu-checked{background:#f0fff4}td.slot-built{background:#ddf4ff}
#other-runs li{margin:.15rem 0}h2{font-size:1.1rem;margin:1.2rem 0 .5rem}
"""


_e = html_marks.text


def _slot(cell: CellResult | None, index: Mapping[str, int]) -> str:
    if cell is None:
        return '<td class="slot empty" title="no results for this combination">—</td>'
    verdict, why = common.verdict_of(cell)
    if verdict is Verdict.INCOMPATIBLE:
        return (f'<td class="slot excluded" data-cell="{_e(cell.cell_id)}" data-index="{index[cell.cell_id]}" '
                f'title="{_e(f"{cell.cell_id}: excluded: {why}")}">{html_marks.badge(verdict)}</td>')
    title = "\n".join([f"{cell.cell_id}: {verdict.value}: {why}", *grid.arch_provenance(cell)])
    archs = grid.arch_line(cell)
    return (f'<td class="slot slot-{verdict.value}" data-cell="{_e(cell.cell_id)}" data-index="{index[cell.cell_id]}" '
            f'title="{_e(title)}">{html_marks.badge(verdict)}'
            + (f'<div class="archs">{_e(archs)}</div>' if archs else "") + "</td>")


def render(run: RunResults, index: Mapping[str, int]) -> str:
    """The matrix section (empty when no result has matrix coordinates) and the other runs."""
    view = grid.layout(run)
    parts = []
    if view.slots:
        groups = "".join(f'<th scope="colgroup" class="lane" colspan="{len(view.toolkits)}">{_e(lane)}</th>'
                         for lane in view.lanes)
        toolkits = "".join(f'<th scope="col">{_e(t)}</th>' for _ in view.lanes for t in view.toolkits)
        rows = "".join(
            f'<tr><th scope="row">{_e(version)}</th>'
            + "".join(_slot(view.at(version, lane, t), index) for lane in view.lanes for t in view.toolkits)
            + "</tr>"
            for version in view.versions
        )
        parts.append(
            f"<h2>Compatibility matrix</h2><p class=\"legend\">base {_e(view.base)}: SGLang versions down, torch "
            "lane and CUDA toolkit across. Each cell: its verdict, then the GPU archs its GPU stages ran on "
            "(✓ all passed there, ✕ one failed there). Hover for the reason and where each arch ran; click for "
            "the stages. Grey: excluded (hover for why) or no results.</p>"
            f'<table id="compat"><thead><tr><th rowspan="2" scope="col">SGLang</th>{groups}</tr>'
            f"<tr>{toolkits}</tr></thead><tbody>{rows}</tbody></table>"
        )
    if view.others:
        items = []
        for cell in view.others:
            verdict, why = common.verdict_of(cell)
            archs = grid.arch_line(cell)
            items.append(
                f'<li data-cell="{_e(cell.cell_id)}"><b>{_e(cell.cell_id)}</b> ({_e(grid.place(cell))}): '
                f"{html_marks.badge(verdict)}"
                + (f' <span class="archs">{_e(archs)}</span>' if archs else "")
                + f" — {_e(why)}</li>"
            )
        parts.append(f'<h2>Other runs</h2><p class="legend">host mode, in place in LXC, other bases</p>'
                     f'<ul id="other-runs">{"".join(items)}</ul>')
    return "".join(parts)
