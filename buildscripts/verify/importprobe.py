"""Host-mode probe output -> results: read the JSON that `python -m buildscripts.probe --out FILE`
wrote on a machine where this package's dependencies may be missing (a GPU test machine, an LXC
container), then classify failures, judge verdicts and write results.json plus a summary.md.

  python -m buildscripts import-probe --cell ID=FILE [--cell ID=FILE ...] --out DIR [--title TEXT]
      [--axis KEY=VALUE ...] [--cell-axis ID=KEY:VALUE ...] [--expect ID=STAGE:CLASS:REASON]
      [--note TEXT ...]

There is no image in host mode: the build is recorded as passed with the reason "host mode", so the
verdict comes from the stages alone, by the same `results.judge` as every other run. A file is what a
probe printed, with no host beside it: no GPU was handed over and no server observed, so its GPU stages
are claims and fail as such (verify/claims.py); a GPU verdict comes from `verify --host` on that machine.
The file still gives CPU-stage results, and server start-up times (`--timing`) as measurements.
Its records are NOT sealed either: this command did not run the probe, so they are for reports only and vouch
for nothing (`tag`, `promote`, `export` and the build's reuse refuse them).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import results
from ..errors import ResultsError
from ..results import BuildResult, CellResult, ExpectedFailure, RunResults, StageResult, Status, cell_record
from ..results.schema import LADDER
from ..workspace import Workspace
from . import claims, served
from .gpus import Handed
from .output import read_file, to_stage, with_notes
from .stagelines import StageLines

HOST_BUILD = "host mode: the current Python environment, no image was built"
FROM_FILE = Handed(why_none="the stages come from a probe's output file: no host handed it a GPU or observed its "
                            "server (run `verify --host` on that machine)")


def cell_from_probe(cell_id: str, path: Path, axes: dict[str, str],
                    expected: ExpectedFailure | None = None) -> CellResult:
    """The judged record of one host-mode probe output file."""
    stages = claims.backed(served.merge(file_stages(read_file(path)), None, None), FROM_FILE, "host")
    return cell_record(cell_id, axes=axes, targets=axes.get("archs", "").split(), expected=expected,
                       build=BuildResult(status=Status.PASSED, reason=HOST_BUILD), stages=stages)


def file_stages(raws: Sequence[dict[str, Any]]) -> list[StageResult]:
    """The stages of a probe's output file under the reader's one rule (stagelines.py), with the ladder as the
    order asked: one entry per stage, in ladder order; a second one, one out of order or an unknown one is
    refused and noted."""
    lines = StageLines(tuple(n for n in LADDER if n in {raw.get("name") for raw in raws}))
    for raw in raws:
        lines.offer(raw)
    return with_notes([to_stage(raw) for raw in lines.accepted], lines)


def timing_rows(label: str, raw: Sequence[dict[str, Any]]) -> str:
    """One Markdown row of server start-up times from a probe output (timing runs, not verdicts)."""
    server = next((r for r in raw if r.get("name") == "server"), {})
    ev = server.get("evidence", {})
    outcome = server.get("status", "not run")
    if outcome == "failed":
        outcome += ": " + str(server.get("reason", ""))[:120]
    argv = [str(a) for a in ev.get("argv", [])]
    drop = {i + k for i, a in enumerate(argv) if a in ("--model-path", "--host", "--port") for k in (0, 1)}
    flags = " ".join(a for i, a in enumerate(argv[2:], start=2) if i not in drop)  # after -m sglang...
    return (f"| {label} | `{flags}` | {ev.get('seconds_to_http', '–')} | {ev.get('seconds_to_ready', '–')} | "
            f"{outcome.replace('|', '/')} |")


def summary_markdown(run: RunResults, title: str, notes: Sequence[str],
                     timings: Sequence[tuple[str, list[dict[str, Any]]]] = ()) -> str:
    """A short human summary: verdict per cell, server start-up times, then each stage of each cell."""
    lines = [f"# {title}", "", f"Run `{run.run_id}` on `{run.runner}`, finished {run.finished}.", ""]
    lines += [f"- {note}" for note in notes]
    if timings:
        lines += ["", "## Server start-up (seconds from launch)", "",
                  "| run | server flags | HTTP up | ready (/health_generate 200) | outcome |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [timing_rows(label, raw) for label, raw in timings]
    lines += ["", "| cell | verdict | why |", "| --- | --- | --- |"]
    for cell in run.cells:
        lines.append(f"| `{cell.cell_id}` | **{cell.verdict}** | {cell.verdict_reason or ''} |")
    for cell in run.cells:
        lines += ["", f"## `{cell.cell_id}`", "", "| stage | status | seconds | detail |",
                  "| --- | --- | --- | --- |"]
        for stage in cell.stages:
            lines.append(f"| {stage.name} | {stage.status} | {stage.duration_s:.1f} | {_detail(stage)} |")
    return "\n".join(lines) + "\n"


def _detail(stage: StageResult) -> str:
    ev = stage.evidence
    if stage.status is Status.FAILED:
        text = f"`{stage.failure_class}`: {stage.reason}"
    elif stage.name == "server" and ev.get("seconds_to_ready") is not None:
        text = f"HTTP up {ev.get('seconds_to_http')} s, ready {ev['seconds_to_ready']} s"
    elif stage.name == "first-generation":
        text = str(ev.get("reference", {}).get("verdict", ""))
    elif stage.name == "gpu-visible" and stage.status is Status.PASSED:
        text = f"{ev.get('name')} capability {ev.get('capability')}, driver {ev.get('driver')}"
    else:
        text = stage.reason or ""
    return text.replace("|", "\\|").replace("\n", " ")[:300]


def _expectation(text: str) -> ExpectedFailure:
    """`STAGE[,STAGE]:CLASS:REASON` (CLASS may be empty) -> the declared expected failure."""
    stage, _, rest = text.partition(":")
    failure_class, _, reason = rest.partition(":")
    if not stage:
        msg = f"--expect {text!r} must look like STAGE:CLASS:REASON"
        raise ResultsError(msg, hint="e.g. --expect host-b=import:cuda-home-missing:no toolkit")
    return ExpectedFailure(stages=stage.split(","), failure_class=failure_class or None, reason=reason)


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            msg = f"{what} {value!r} must look like KEY=VALUE"
            raise ResultsError(msg, hint=f"e.g. {what} host-a=/path/a.json")
        out[key] = rest
    return out


def main(argv: Sequence[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    del ws, env  # every path comes from the arguments
    ap = argparse.ArgumentParser(prog="python -m buildscripts import-probe", description=__doc__)
    ap.add_argument("--cell", action="append", required=True, help="CELL_ID=PROBE_JSON (repeatable)")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json and summary.md")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--runner", default=None, help="where the probe ran, e.g. 'an H200 test machine'")
    ap.add_argument("--title", default="Host-mode verification")
    ap.add_argument("--axis", action="append", default=[], help="KEY=VALUE shown with every cell")
    ap.add_argument("--cell-axis", action="append", default=[], help="CELL_ID=KEY:VALUE for one cell")
    ap.add_argument("--expect", action="append", default=[], help="CELL_ID=STAGE:CLASS:REASON")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--timing", action="append", default=[], help="LABEL=PROBE_JSON: start-up times only")
    a = ap.parse_args(list(argv))
    axes = _pairs(a.axis, "--axis")
    expects = {cid: _expectation(text) for cid, text in _pairs(a.expect, "--expect").items()}
    own: dict[str, dict[str, str]] = {}
    for value in a.cell_axis:
        cid, _, pair = value.partition("=")
        key, _, val = pair.partition(":")
        own.setdefault(cid, {})[key] = val
    cells = [cell_from_probe(cid, Path(path), {**axes, **own.get(cid, {})}, expects.get(cid))
             for cid, path in _pairs(a.cell, "--cell").items()]
    run = RunResults(run_id=a.run_id or f"host-{results.now()}", started=min(c.finished or "" for c in cells),
                     finished=results.now(), cells=cells)
    if a.runner:
        run = run.model_copy(update={"runner": a.runner})
    results.save(run, a.out / "results.json")
    timings = [(label, read_file(Path(path))) for label, path in _pairs(a.timing, "--timing").items()]
    (a.out / "summary.md").write_text(summary_markdown(run, a.title, a.note, timings))
    for cell in cells:
        print(f"{cell.cell_id}: {cell.verdict} ({cell.verdict_reason})")
    return 0
