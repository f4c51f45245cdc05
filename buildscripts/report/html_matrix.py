"""The compatibility-matrix view of the HTML page (layout from `grid`): verdict and archs per slot,
excluded slots greyed with their reason on hover, the other runs listed under it.

A slot carries the index of its cell's row in the stage-by-stage table below, so that a click
opens that row's drill-down (the page's script does it).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..results import CellResult, Verdict
from . import bygpu, common, grid, html_marks
from .weigh import Weighed

CSS = """
.compat{margin-bottom:.6rem}.compat th{background:#f2f4f7;font-size:.8rem}.compat th.lane{text-align:center}
.compat th[scope=row]{text-align:right}
.compat td.slot{text-align:center;min-width:7.5rem;cursor:pointer}.compat td.slot:hover{outline:2px solid #4a7fd4}
.compat td.excluded,.compat td.empty{background:#f0f1f3;color:#8c959f;cursor:help}
.compat .archs{font-size:.78rem;font-family:ui-monospace,monospace;color:#1d2228}
td.slot-verified{background:#dafbe1}td.slot-failed,td.slot-unexpected-pass{background:#ffebe9}
td.slot-expected-failure{background:#fff8c5}td.slot-claimed{background:#fffdf2}td.slot-cpu-checked{background:#f0fff4}td.slot-built{background:#ddf4ff}
#other-runs li{margin:.15rem 0}h2{font-size:1.1rem;margin:1.2rem 0 .5rem}
.scroll{overflow-x:auto;max-width:100%}#by-gpu td,#by-gpu th{font-size:.85rem}#by-gpu code{word-break:break-all}
#by-gpu .none{color:#9a6700}#by-gpu tr.platform th{background:#f6f8fa;text-align:left}
#answer td,#answer th{font-size:.9rem}#answer code{word-break:break-all}#answer .none{color:#8c959f}
@media (max-width:600px){#answer thead{display:none}#answer tr,#answer th,#answer td{display:block;border:0}
#answer tr{border:1px solid #d8dde3;margin-bottom:.5rem;padding:.2rem}
#answer td::before{content:attr(data-label);display:block;color:#57606a;font-size:.75rem}
#answer td[data-label=platform],#answer tr>th{display:inline-block;font-weight:bold;padding:.2rem .3rem 0 .45rem}
#answer td[data-label=platform]::before{content:none}}
@media (max-width:600px){#by-gpu thead{display:none}#by-gpu tr,#by-gpu th,#by-gpu td{display:block;border:0}
#by-gpu tr{border:1px solid #d8dde3;margin-bottom:.5rem;padding:.2rem}#by-gpu th{text-align:left}
#by-gpu td::before{content:attr(data-label);display:block;color:#57606a;font-size:.75rem}}
"""


_e = html_marks.text


def _slot(cell: CellResult | None, index: Mapping[str, int], weighed: Weighed) -> str:
    if cell is None:
        return '<td class="slot empty" title="no results for this combination">—</td>'
    shown = common.shown(cell, weighed)
    if shown.verdict is Verdict.INCOMPATIBLE:
        return (f'<td class="slot excluded" data-cell="{_e(cell.cell_id)}" data-index="{index[cell.cell_id]}" '
                f'title="{_e(f"{cell.cell_id}: excluded: {shown.why}")}">{html_marks.shown_badge(shown)}</td>')
    vouched = weighed.vouched(cell)
    title = "\n".join([f"{cell.cell_id}: {shown.word}: {shown.why}", *grid.arch_provenance(cell, vouched=vouched)])
    archs = grid.arch_line(cell, vouched=vouched)
    return (f'<td class="slot slot-{shown.word}" data-cell="{_e(cell.cell_id)}" data-index="{index[cell.cell_id]}" '
            f'title="{_e(title)}">{html_marks.shown_badge(shown)}'
            + (f'<div class="archs">{_e(archs)}</div>' if archs else "") + "</td>")


def gpu_view(weighed: Weighed) -> str:
    """The view by GPU (report/bygpu.py) as a table: a group of rows per platform, one row per arch."""
    def codes(ids: list[str], suffix: str = "") -> str:
        return "<br>".join(f"<code>{_e(i)}</code>{suffix}" for i in ids)

    groups = []
    views = bygpu.views(weighed)
    for platform, found in views:
        rows = [f'<tr class="platform"><th colspan="5" scope="rowgroup">images for {_e(platform)}</th></tr>']
        for row in found:
            verified = "<br>".join(f"<code>{_e(v.pull)}</code>" + (f"<br>check: <code>{_e(v.check)}</code>"
                                                                    if v.check else " (not pushed)")
                                   for v in row.verified)
            if not verified:
                verified = ('<span class="none">nothing has run on this GPU yet</span>' if row.nothing_ran
                            else '<span class="none">nothing verified yet</span>')
            ran = "<br>".join(filter(None, [codes(row.ran), codes(row.claimed, " (claimed, not vouched for)")]))
            rows.append(f'<tr data-platform="{_e(platform)}" data-arch="{_e(row.arch)}">'
                        f'<th scope="row">{_e(row.arch)}</th>'
                        f'<td data-label="for example">{_e(", ".join(row.products)) or "—"}</td>'
                        f'<td data-label="{_e(bygpu.HEADINGS[2])}">{verified}</td>'
                        f'<td data-label="ran there, not verified">{ran or "—"}</td>'
                        f'<td data-label="only compiled and audited for it">{codes(row.compiled) or "—"}</td></tr>')
        groups.append(f'<tbody data-platform="{_e(platform)}">{"".join(rows)}</tbody>')
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in bygpu.HEADINGS)
    platforms = " and ".join(platform for platform, _ in views)
    return (f'<h2>By GPU</h2><p class="legend">images for {_e(platforms)}, each its own: {_e(bygpu.ABOUT)}.</p>'
            f'<div class="scroll"><table id="by-gpu"><thead><tr>{head}</tr></thead>{"".join(groups)}'
            "</table></div>")


def answer_view(weighed: Weighed) -> str:
    """The answer first: per platform and GPU arch, the tag to pull, its state there, the check command."""
    rows = []
    for row in bygpu.rows(weighed):
        answer = row.answer
        tag = f"<code>{_e(answer.tag)}</code>" if answer.cell_id else "—"
        check = f"<code>{_e(answer.check)}</code>" if answer.check else "—"
        rows.append(f'<tr data-platform="{_e(row.platform)}" data-arch="{_e(row.arch)}" data-state="{answer.state}">'
                    f'<td data-label="platform">{_e(row.platform)}</td><th scope="row">{_e(row.arch)}</th>'
                    f'<td data-label="for example">{_e(", ".join(row.products)) or "—"}</td>'
                    f'<td data-label="tag to pull">{tag}</td>'
                    f'<td data-label="state there">{html_marks.state_badge(answer.state)}</td>'
                    f'<td data-label="check its signed verdict">{check}</td></tr>')
    head = "".join(f'<th scope="col">{h}</th>' for h in ("platform", "GPU arch", "for example", "tag to pull",
                                                          "state there", "check its signed verdict"))
    return (f'<h2>Which image for your GPU</h2><div class="scroll"><table id="answer"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div><p class="legend">{_e(common.ANSWER_LEGEND_WORDS)}. Only a '
            "record sealed by a key this report trusts, of the cell's own image and its current definition in "
            "matrix.yaml, counts.</p>")


def platform_grid(found: grid.PlatformGrid, index: Mapping[str, int], weighed: Weighed) -> str:
    """One platform's grid: its reachable cells, the combinations not built counted once per reason."""
    view = found.grid
    toolkits = "".join(f'<th scope="col">{_e(t)}</th>' for t in view.toolkits)
    rows = "".join(
        f'<tr><th scope="row">{_e(version)}</th><th scope="row" class="lane">{_e(lane)}</th>'
        + "".join(_slot(view.at(version, lane, t), index, weighed) for t in view.toolkits) + "</tr>"
        for version, lane in view.rows)
    excluded = "; ".join(f"{n} {why}" for why, n in found.excluded)
    return (f'<h3>{_e(found.platform)}</h3><div class="scroll"><table class="compat" data-platform='
            f'"{_e(found.platform)}"><thead><tr><th scope="col">SGLang</th><th scope="col">torch lane</th>{toolkits}'
            f"</tr></thead><tbody>{rows}</tbody></table></div>"
            + (f'<p class="legend">not built for {_e(found.platform)}: {_e(excluded)}</p>' if excluded else ""))


def render(weighed: Weighed, index: Mapping[str, int]) -> str:
    """The answer, each platform's grid, the view by GPU in detail, and the runs no grid holds."""
    parts = [answer_view(weighed)]
    grids = grid.platform_grids(weighed)
    if grids:
        parts.append("<h2>Each platform's cells</h2><p class=\"legend\">each SGLang release with the torch lane it "
                     "can run on, CUDA toolkit layers across; each cell: its verdict, then the GPU archs its GPU "
                     "stages ran on (✓ all passed there, ✕ one failed there). Hover for the reason and where each "
                     "arch ran; click for the stages.</p>" + "".join(platform_grid(g, index, weighed) for g in grids))
    parts.append(gpu_view(weighed))
    others = grid.others(weighed)
    if others:
        items = []
        for cell in others:
            shown = common.shown(cell, weighed)
            archs = grid.arch_line(cell, vouched=weighed.vouched(cell))
            items.append(
                f'<li data-cell="{_e(cell.cell_id)}"><b>{_e(cell.cell_id)}</b> ({_e(grid.place(cell))}): '
                f"{html_marks.shown_badge(shown)}"
                + (f' <span class="archs">{_e(archs)}</span>' if archs else "")
                + f" — {_e(shown.short)}</li>"
            )
        parts.append(f'<h2>Other runs</h2><p class="legend">not images of today\'s matrix: host mode, in place in '
                     f'LXC, other images, other bases</p><ul id="other-runs">{"".join(items)}</ul>')
    return "".join(parts)
