"""One self-contained HTML page: the compatibility matrix, then every cell stage by stage, with filters
and a drill-down per cell.

Inline CSS and JS only (no external URL, so the page works offline and as a CI artefact). Every
value from the results is escaped; the script only filters rows and opens drill-downs.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..attest import signed
from ..results import CellResult, StageResult
from ..results.notes import arch_code, measured
from . import common, grid, html_marks, html_matrix, weigh
from .common import Shown
from .weigh import Weighed

FILTERS = ("verdict", "sglang", "lane", "toolkit")

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1d2228;background:#fff}
@media (max-width:600px){body{margin:.6rem}}.legend{overflow-wrap:anywhere}
h1{font-size:1.4rem;margin:0 0 .2rem}header p{margin:0 0 1rem;color:#555}
#filters{display:flex;gap:1rem;flex-wrap:wrap;align-items:end;margin-bottom:1rem}
#filters label{display:flex;flex-direction:column;font-size:.8rem;color:#444}
table{border-collapse:collapse}th,td{border:1px solid #d8dde3;padding:.25rem .45rem;vertical-align:top}
#matrix th{background:#f2f4f7;font-size:.8rem}#matrix td.mark{text-align:center;font-weight:bold}
tr.cell-row{cursor:pointer}tr.cell-row:hover{background:#f7f9fc}tr.cell-row:focus{outline:2px solid #4a7fd4}
.s-passed{color:#1a7f37}.s-failed{color:#cf222e}.s-skipped{color:#9a6700}.s-aborted{color:#8c959f}
tr.detail>td{background:#fafbfc;padding:.8rem 1rem}.detail h3{margin:.2rem 0 .5rem;font-size:1rem}
.detail dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .8rem;margin:0 0 .8rem}
.detail dt{color:#57606a}.detail dd{margin:0;font-family:ui-monospace,monospace;word-break:break-all}
.detail table{margin-bottom:.8rem;font-size:.85rem}
pre{background:#1d2228;color:#e6edf3;padding:.6rem;max-height:18rem;overflow:auto;white-space:pre-wrap}
.nowrap{white-space:nowrap}.legend{color:#57606a;font-size:.85rem}.gpu-none{color:#9a6700}
"""

SCRIPT = """
(function(){
  var selects=document.querySelectorAll('#filters select');
  function apply(){
    var want={},shown=0;
    selects.forEach(function(s){want[s.dataset.axis]=s.value;});
    document.querySelectorAll('tr.cell-row').forEach(function(row){
      var ok=Object.keys(want).every(function(k){return !want[k]||row.dataset[k]===want[k];});
      row.hidden=!ok;
      var detail=document.getElementById('detail-'+row.dataset.index);
      if(!ok){detail.hidden=true;row.setAttribute('aria-expanded','false');}
      if(ok){shown++;}
    });
    document.getElementById('shown').textContent=String(shown);
  }
  function toggle(row){
    var detail=document.getElementById('detail-'+row.dataset.index);
    detail.hidden=!detail.hidden;
    row.setAttribute('aria-expanded',detail.hidden?'false':'true');
  }
  selects.forEach(function(s){s.addEventListener('change',apply);});
  document.querySelectorAll('.compat td.slot[data-index]').forEach(function(slot){
    slot.addEventListener('click',function(){
      var row=document.querySelector('tr.cell-row[data-index="'+slot.dataset.index+'"]');
      if(row.hidden){selects.forEach(function(s){s.value='';});apply();}
      if(document.getElementById('detail-'+row.dataset.index).hidden){toggle(row);}
      row.scrollIntoView();row.focus();
    });
  });
  document.querySelectorAll('tr.cell-row').forEach(function(row){
    row.addEventListener('click',function(){toggle(row);});
    row.addEventListener('keydown',function(e){
      if(e.key==='Enter'||e.key===' '){e.preventDefault();toggle(row);}
    });
  });
  apply();
})();
"""


_e = html_marks.text


def _filter(axis: str, values: Iterable[str]) -> str:
    options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in sorted(set(values)))
    return (f'<label>{_e(axis)}<select id="f-{axis}" data-axis="{axis}">'
            f'<option value="">all</option>{options}</select></label>')


def _axis(cell: CellResult, axis: str, weighed: Weighed) -> str:
    return common.shown(cell, weighed).word if axis == "verdict" else cell.axes.get(axis, "")


def _size(size: int | None) -> str:
    return f"{size / 1e9:.2f} GB ({size} bytes)" if size is not None else "unknown"


def _dl(items: Iterable[tuple[str, object]]) -> str:
    shown = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items if v not in (None, "", {}, []))
    return f"<dl>{shown}</dl>"


def _expected(cell: CellResult) -> str | None:
    if not cell.expected:
        return None
    exp = cell.expected
    return f"{','.join(exp.stages)}/{exp.failure_class or ''}: {exp.reason}"


def _described(cell: CellResult) -> str:
    """Links to the signed SBOM and provenance the build wrote for a staged image (attest/signed.py: beside the run's
    results, runs/RUN/described/CELL/); a merged report names the run they are in. A link, not a claim: `check
    --sbom` says whether they verify."""
    if not (cell.image.repository and cell.image.digest):
        return ""
    folder = f"{signed.FOLDER}/{cell.cell_id}"
    if cell.run_id:
        return f"<p>signed SBOM and provenance: <code>runs/{_e(cell.run_id)}/{_e(folder)}/</code></p>"
    links = " · ".join(f'<a href="../{_e(folder)}/{name}">{name}</a>' for name in signed.FILES.values())
    return f"<p>signed SBOM and provenance: {links}</p>"


def _detail(cell: CellResult, shown: Shown) -> str:
    verify_s = sum(s.duration_s for s in cell.stages)
    facts = [
        ("verdict", f"{shown.word}: {shown.why}"),
        ("image", cell.image.ref), ("image id", cell.image.id), ("digest", cell.image.digest),
        ("image size", _size(cell.image.size_bytes) if cell.image.size_bytes is not None else None),
        ("build time", f"{cell.build.duration_s:.1f} s" + (" (cached)" if cell.build.cached else "")
         if cell.build else None),
        ("verify time", f"{verify_s:.1f} s" if cell.stages else None),
        ("good tags", ", ".join(cell.tags)),
        ("promoted", ", ".join(f"{r}@{d}" for r, d in cell.promoted.items())),
        ("expected", _expected(cell)),
        ("excluded", cell.excluded),
        ("GPU archs", "; ".join(grid.arch_provenance(cell, vouched=not shown.marks))),
        *arch_code(cell),
        *measured(cell),
        ("run", " · ".join(p for p in (cell.run_id, cell.runner, cell.finished) if p)),
    ]
    versions = _dl(sorted(cell.versions.items())) if cell.versions else "<p>no versions recorded</p>"
    locks = _dl(sorted(cell.locks.items())) if cell.locks else ""
    places = "".join(
        f'<li><b>{_e(name)}</b>: <span class="{"gpu-none" if where.startswith("not run") else ""}">'
        f"{_e(where)}</span></li>"
        for name, where in common.gpu_stage_places(cell)
    )
    rows, logs = [], []
    for stage in cell.stages:
        status = stage.status.value
        rows.append(
            f'<tr><td>{_e(stage.name)}</td>'
            f'<td class="s-{status} nowrap">{common.mark(status)} {_e(status)}</td>'
            f"<td>{stage.duration_s:.1f} s</td><td>{_e(stage.where)}</td><td>{_e(stage.reason)}</td>"
            f"<td>{_e(stage.failure_class)}</td><td>{_e(stage.hint)}</td>"
            f"<td>{_e(' · '.join(p for p in (stage.run_id, stage.runner, stage.finished, _carried(stage)) if p))}"
            "</td></tr>"
        )
        if stage.log_excerpt:
            logs.append(f"<h4>log excerpt: {_e(stage.name)}</h4><pre>{_e(stage.log_excerpt)}</pre>")
    stages = (
        "<table><thead><tr><th>stage</th><th>status</th><th>time</th><th>where</th><th>reason</th>"
        "<th>failure class</th><th>hint</th><th>from run</th></tr></thead><tbody>" + "".join(rows) +
        "</tbody></table>" if rows else "<p>no stage ran</p>"
    )
    return (f"<h3>{_e(cell.cell_id)}</h3>{_dl(facts)}{_described(cell)}<h4>GPU stages</h4><ul>{places}</ul>"
            f"<h4>stages</h4>{stages}{''.join(logs)}<h4>key versions</h4>{versions}"
            + (f"<h4>lockfiles</h4>{locks}" if locks else ""))


def render(weighed: Weighed) -> str:
    run = weighed.run
    columns = common.stage_columns(run)
    cells = common.sort_cells(run.cells)
    head = "".join(f"<th>{_e(c)}</th>" for c in ["cell", *columns, "verdict", "GPU stages ran on"])
    body = []
    for index, cell in enumerate(cells):
        shown = common.shown(cell, weighed)
        data = " ".join(f'data-{axis}="{_e(_axis(cell, axis, weighed))}"' for axis in FILTERS)
        marks = "".join(
            f'<td class="mark s-{status}" title="{_e(f"{col}: {status} {reason}".strip())}">'
            f"{common.mark(status)}</td>"
            for col in columns for status, reason in [common.outcome(cell, col)]
        )
        gpu = common.gpu_summary(cell, vouched=weighed.vouched(cell))
        body.append(
            f'<tr class="cell-row" tabindex="0" aria-expanded="false" data-index="{index}" {data}>'
            f"<td>{_e(cell.cell_id)}</td>{marks}"
            f"<td>{html_marks.shown_badge(shown, shown.why)}</td>"
            f'<td class="{"gpu-none" if gpu == "not run on a GPU" else ""}">{_e(gpu)}</td></tr>'
            f'<tr class="detail" id="detail-{index}" hidden><td colspan="{len(columns) + 3}">'
            f"{_detail(cell, shown)}</td></tr>"
        )
    filters = "".join(_filter(axis, (_axis(c, axis, weighed) for c in cells)) for axis in FILTERS)
    index_of = {cell.cell_id: index for index, cell in enumerate(cells)}
    when = run.finished or run.started
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>SGLang image compatibility: {_e(run.run_id)}</title>"
        f"<style>{CSS}{html_marks.CSS}{html_matrix.CSS}</style></head><body>"
        f"<header><h1>SGLang image compatibility</h1><p>results of {_e(run.run_id)} · {_e(when)} · "
        f"runner(s) {_e(run.runner)} · {len(cells)} cell(s)</p></header>"
        f'<section id="view">{html_matrix.render(weighed, index_of)}</section>'
        '<h2>Every cell, stage by stage</h2>'
        f'<section id="filters">{filters}'
        f'<span>showing <b id="shown">{len(cells)}</b> of {len(cells)}</span></section>'
        f'<div class="scroll"><table id="matrix"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        "</table></div>"
        f'<p class="legend">{_e(common.LEGEND)}. Click a row for its stages, logs and versions. '
        "“verified” means every stage, the GPU stages included, passed on a GPU of a target arch, in a record "
        f"sealed by a key this report trusts.</p><p class=\"legend\">{_e(weigh.LEGEND_WORDS)}</p>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def _carried(stage: StageResult) -> str:
    """A carried stage says so where its provenance is shown: it ran on the build runner (verify/carry.py)."""
    return f"carried, sealed by key {stage.sealed_by[:16]}" if stage.carried_from and stage.sealed_by else ""
