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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ResultsError
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..results import ExpectedFailure

ABOUT = "turn host-mode probe JSON into results.json + summary.md"


@dataclass(frozen=True, kw_only=True)
class Options:
    cells: Mapping[str, Path]                       # cell id -> the probe's output file
    out: Path                                       # folder for results.json and summary.md
    run_id: str | None = None                       # default: host-TIME
    runner: str | None = None                       # where the probe ran
    title: str = "Host-mode verification"
    axes: Mapping[str, str] = field(default_factory=dict)                   # shown with every cell
    cell_axes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # per cell, over `axes`
    expected: Mapping[str, ExpectedFailure] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    timings: Mapping[str, Path] = field(default_factory=dict)               # label -> a probe output: times only


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    del ws, env  # every path comes from the arguments
    ap = argparse.ArgumentParser(prog="python -m buildscripts import-probe", description=__doc__)
    ap.add_argument("--cell", action="append", required=True, help="CELL_ID=PROBE_JSON (repeatable)")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json and summary.md")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--runner", default=None, help="where the probe ran, e.g. 'an H200 test machine'")
    ap.add_argument("--title", default=Options.title)
    ap.add_argument("--axis", action="append", default=[], help="KEY=VALUE shown with every cell")
    ap.add_argument("--cell-axis", action="append", default=[], help="CELL_ID=KEY:VALUE for one cell")
    ap.add_argument("--expect", action="append", default=[], help="CELL_ID=STAGE:CLASS:REASON")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--timing", action="append", default=[], help="LABEL=PROBE_JSON: start-up times only")
    a = ap.parse_args(list(argv))
    axes = _pairs(a.axis, "--axis")
    expected = {cid: _expectation(text) for cid, text in _pairs(a.expect, "--expect").items()}
    own: dict[str, dict[str, str]] = {}
    for value in a.cell_axis:
        cid, _, pair = value.partition("=")
        key, _, val = pair.partition(":")
        own.setdefault(cid, {})[key] = val
    return Options(cells={cid: Path(path) for cid, path in _pairs(a.cell, "--cell").items()}, out=a.out,
                   run_id=a.run_id, runner=a.runner, title=a.title, axes=axes, cell_axes=own, expected=expected,
                   notes=tuple(a.note), timings={k: Path(v) for k, v in _pairs(a.timing, "--timing").items()})


def run(options: Options) -> int:
    from .. import results
    from ..results import RunResults
    from ..verify.importprobe import cell_from_probe, summary_markdown
    from ..verify.output import read_file

    cells = [cell_from_probe(cid, path, {**options.axes, **options.cell_axes.get(cid, {})},
                             options.expected.get(cid))
             for cid, path in options.cells.items()]
    run = RunResults(run_id=options.run_id or f"host-{results.now()}", started=min(c.finished or "" for c in cells),
                     finished=results.now(), cells=cells)
    if options.runner:
        run = run.model_copy(update={"runner": options.runner})
    results.save(run, options.out / "results.json")
    timings = [(label, read_file(path)) for label, path in options.timings.items()]
    (options.out / "summary.md").write_text(summary_markdown(run, options.title, options.notes, timings))
    for cell in cells:
        print(f"{cell.cell_id}: {cell.verdict} ({cell.verdict_reason})")
    return 0


def _expectation(text: str) -> ExpectedFailure:
    """`STAGE[,STAGE]:CLASS:REASON` (CLASS may be empty) -> the declared expected failure."""
    from ..results import ExpectedFailure

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
