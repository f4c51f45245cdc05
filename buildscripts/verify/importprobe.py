"""A probe's output file judged into a cell's record, and a run of them summed up in Markdown: what
`python -m buildscripts import-probe` does (commands/import_probe.py says why such a record vouches for nothing).

The file is what a probe printed with no host beside it, so its GPU stages go through the host's claims check
(claims.py) as unbacked, and its server stages through `served.merge` with nothing observed: the CPU stages and
the server's start-up times are what it gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results import BuildResult, CellResult, ExpectedFailure, Given, RunResults, StageResult, Status, cell_record
from ..results.record import LADDER
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
    given = Given(axes=axes, targets=axes.get("archs", "").split(), expected=expected)
    return cell_record(cell_id, given, build=BuildResult(status=Status.PASSED, reason=HOST_BUILD), stages=stages)


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
