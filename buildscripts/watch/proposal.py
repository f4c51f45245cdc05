"""The proposal report: the new cells' locks and verdicts beside today's, from saved records only.

`record` gathers what was judged elsewhere (lockfiles/index.json for locks, results.json of the build for
verdicts, the newest saved run of each cell's counterpart for today's): nothing is judged again here.
`markdown` renders it; it is the body of the pull request the scheduled job opens.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..matrix import Cell, Matrix
from ..results import CellResult, RunResults, judge
from ..verify.reuse import saved_runs
from ..workspace import Workspace
from .edit import Change, twin
from .news import Findings

KEYS = ("sglang", "torch", "cuda", "flashinfer", "sglang-kernel", "deep-gemm", "triton", "nvcc")


@dataclass(frozen=True, kw_only=True)
class Made:
    """What the proposal's tree gave: the new cells' locks and which of them could be built, what was built (with
    --build), the files the change touches; and the locks of the matrix as it is today, to compare with."""

    locks: Mapping[str, Mapping[str, Any]]
    buildable: Sequence[str]
    built: RunResults | None
    changed: Sequence[str]
    today: Mapping[str, Mapping[str, Any]]


def record(findings: Findings, change: Change, made: Made, before: Matrix, ws: Workspace, *, build_asked: bool,
           branch: str | None) -> dict[str, Any]:
    releases = findings.proposable()
    title = "watch: propose " + ", ".join(
        f"sglang {s.version} (torch {s.torch}{', new lane' if s.new_lane else ''}"
        f"{' in CUDA flavour ' + s.new_flavour['name'] if s.new_flavour else ''})" for s in releases)
    history = saved_runs(ws.runs)
    cells = [_cell(cell, made.locks.get(cell.id, {}), made.built, before, made.today, history)
             for cell in change.new_cells]
    diff = "".join(difflib.unified_diff(before.path.read_text(encoding="utf-8").splitlines(keepends=True),
                                        change.text.splitlines(keepends=True), "a/matrix.yaml", "b/matrix.yaml"))
    return {
        "title": title,
        "releases": [s.version for s in releases],
        "added": change.added,
        "matrix_diff": diff,
        "cells": cells,
        "lock_files": list(made.changed),
        "build": _build_state(build_asked, made.buildable, made.built),
        "branch": branch,
        "watch": findings.to_json(),
    }


def _cell(cell: Cell, lock: Mapping[str, Any], built: RunResults | None, before: Matrix,
          today: Mapping[str, Mapping[str, Any]], history: Sequence[RunResults]) -> dict[str, Any]:
    earlier = twin(cell, before)
    entry: dict[str, Any] = {
        "cell": cell.id,
        "excluded": cell.excluded,
        "expected": f"{', '.join(cell.expected.stages)}: {cell.expected.reason}" if cell.expected else None,
        "lock": lock.get("state", "not locked"),
        "lock_reason": lock.get("reason"),
        "versions": dict(lock.get("versions", {})),
        "result": _result(built.cell(cell.id) if built else None),
        "today": None,
    }
    if earlier is not None:
        saved = next((r.cell(earlier.id) for r in history if r.cell(earlier.id) is not None), None)
        entry["today"] = {"cell": earlier.id, "versions": dict(today.get(earlier.id, {}).get("versions", {})),
                          "result": _result(saved)}
    return entry


def _result(cell: CellResult | None) -> dict[str, Any] | None:
    if cell is None:
        return None
    verdict, reason = judge(cell)
    server = cell.stage("server")
    ready = server.evidence.get("seconds_to_ready") if server else None
    return {
        "verdict": verdict.value, "reason": reason,
        "stages": {s.name: s.status.value for s in cell.stages},
        "size_bytes": cell.image.size_bytes,
        "seconds_to_ready": ready if isinstance(ready, int | float) else None,
        "run_id": cell.run_id,
    }


def _build_state(asked: bool, buildable: Sequence[str], built: RunResults | None) -> dict[str, Any]:
    command = "nox -s build -- " + " ".join(f"--only {c}" for c in buildable)
    if not buildable:
        return {"state": "nothing to build", "command": None, "run_id": None}
    if not asked or built is None:
        return {"state": "not built (run without --build)", "command": command, "run_id": None}
    return {"state": "built and verified", "command": command, "run_id": built.run_id}


# ---------------------------------------------------------------- Markdown


def markdown(data: Mapping[str, Any]) -> str:
    out = [f"## {data['title']}", "", "Proposed by `nox -s watch -- --propose`. Nothing is promoted before this pull "
           "request merges: promotion runs on `main` only, from the images the merged change builds.", ""]
    out += ["### What the index holds that matrix.yaml does not", "", "```", *_watch_lines(data["watch"]), "```", ""]
    out += ["### The change to matrix.yaml", "", *[f"- `{line}`" for line in data["added"]], "",
            "```diff", data["matrix_diff"].rstrip(), "```", ""]
    build = data["build"]
    out += ["### New cells", "", f"Build: {build['state']}" + (f" (`{build['command']}`)" if build["command"] else "")
            + (f", run `{build['run_id']}`" if build["run_id"] else "") + ".", ""]
    out += ["| cell | lock | verdict | stages | size | ready | today |", "|---|---|---|---|---|---|---|"]
    for cell in (c for c in data["cells"] if not c["excluded"]):
        out.append("| " + " | ".join([f"`{cell['cell']}`", _lock(cell), *_outcome(cell["result"], cell),
                                      _today(cell["today"])]) + " |")
    excluded = [c for c in data["cells"] if c["excluded"]]
    if excluded:
        out += ["", f"<details><summary>{len(excluded)} new cell(s) excluded</summary>", "",
                *[f"- `{c['cell']}`: {_cut(c['excluded'])}" for c in excluded], "", "</details>"]
    out += ["", "### What changed in the locks", ""]
    for cell in data["cells"]:
        moved = _moved(cell)
        if moved:
            out.append(f"- `{cell['cell']}`: {moved}")
    out += ["", "<details><summary>lock files</summary>", "", *[f"- `{line}`" for line in data["lock_files"]], "",
            "</details>", ""]
    return "\n".join(out)


def _watch_lines(watch: Mapping[str, Any]) -> list[str]:
    lines = [f"new sglang {s['version']}: {s['follows']}" for s in watch["sglang"]]
    lines += [f"new torch {t['version']} ({t['cuda']}): {t['follows']}" for t in watch["torch"]]
    lines += [f"room: {r['follows']}" for r in watch["room"]]
    return lines + [f"skipped {s['package']} {s['version']}: {s['reason']}" for s in watch["skipped"]]


def _lock(cell: Mapping[str, Any]) -> str:
    if cell["excluded"]:
        return f"excluded: {_cut(cell['excluded'])}"
    reason = f": {_cut(cell['lock_reason'])}" if cell["lock_reason"] else ""
    return f"{cell['lock']}{reason}"


def _outcome(result: Mapping[str, Any] | None, cell: Mapping[str, Any]) -> list[str]:
    if result is None:
        expected = f" (expected: {_cut(cell['expected'])})" if cell.get("expected") else ""
        return ["not built" + expected, "", "", ""]
    stages = result["stages"]
    passed = sum(1 for s in stages.values() if s == "passed")
    failed = [name for name, s in stages.items() if s == "failed"]
    shown = f"{passed}/{len(stages)} passed" + (f", failed: {', '.join(failed)}" if failed else "")
    size = f"{result['size_bytes'] / 1e9:.1f} GB" if result["size_bytes"] else ""
    ready = f"{result['seconds_to_ready']:.0f} s" if result["seconds_to_ready"] is not None else ""
    return [result["verdict"], shown, size, ready]


def _today(today: Mapping[str, Any] | None) -> str:
    if today is None:
        return "(no counterpart)"
    result = today["result"]
    if result is None:
        return f"`{today['cell']}`: no saved result here"
    verdict, stages, size, ready = _outcome(result, {})
    return f"`{today['cell']}`: {verdict}, {stages}" + (f", {size}" if size else "") + (f", ready {ready}" if ready
                                                                                         else "")


def _moved(cell: Mapping[str, Any]) -> str:
    now = cell["versions"]
    was = (cell["today"] or {}).get("versions", {})
    if not now:
        return ""
    parts = [f"{key} {was.get(key, '–')} → {now[key]}" if was.get(key) != now.get(key) else f"{key} {now[key]}"
             for key in KEYS if key in now]
    return ", ".join(parts) + (f" (against `{cell['today']['cell']}`)" if was else "")


def _cut(text: str, width: int = 140) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"
