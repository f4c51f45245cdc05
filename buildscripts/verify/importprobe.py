"""Host-mode probe output -> results: the JSON that `python -m buildscripts.probe --out FILE` wrote on a machine
where this package's dependencies may be missing (a GPU test machine, an LXC container), classified and judged
into a cell's record, and a summary.md of a run of them (`python -m buildscripts import-probe`:
commands/import_probe.py).

There is no image in host mode: the build is recorded as passed with the reason "host mode", so the
verdict comes from the stages alone, by the same `results.judge` as every other run. A file is what a
probe printed, with no host beside it: no GPU was handed over and no server observed, so its GPU stages
are claims and fail as such (verify/claims.py); a GPU verdict comes from `verify --host` on that machine.
The file still gives CPU-stage results, and server start-up times (`--timing`) as measurements.
Its records are NOT sealed either: the importer did not run the probe, so they are for reports only and vouch
for nothing (`tag`, `promote`, `export` and the build's reuse refuse them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results import BuildResult, CellResult, ExpectedFailure, Given, RunResults, StageResult, Status, cell_record
from . import claims, served
from .gpus import Handed
from .output import read_file, to_stage

HOST_BUILD = "host mode: the current Python environment, no image was built"
FROM_FILE = Handed(why_none="the stages come from a probe's output file: no host handed it a GPU or observed its "
                            "server (run `verify --host` on that machine)")


def cell_from_probe(cell_id: str, path: Path, axes: dict[str, str],
                    expected: ExpectedFailure | None = None) -> CellResult:
    """The judged record of one host-mode probe output file."""
    stages = claims.backed(served.merge([to_stage(raw) for raw in read_file(path)], None, None), FROM_FILE, "host")
    given = Given(axes=axes, targets=axes.get("archs", "").split(), expected=expected)
    return cell_record(cell_id, given, build=BuildResult(status=Status.PASSED, reason=HOST_BUILD), stages=stages)


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
