"""The one reader of probe output: result lines (streamed from a container or a host process, or a JSON
file the probe wrote) become classified StageResults, with hung, dead and missing stages spelled out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ResultsError
from ..probe.core import RESULT_PREFIX
from ..proc import Completed
from ..results import StageResult, Status
from ..results.store import without_surrogates
from . import classify
from .plan import grace

FIELDS = ("name", "status", "duration_s", "reason", "evidence", "log_excerpt", "gpu", "arch")


@dataclass
class ProbeRun:
    """What came back from one probe run, before it is turned into stage results."""

    results: list[dict[str, Any]] = field(default_factory=list)
    output: list[str] = field(default_factory=list)   # every line, results included
    exit_code: int | None = None
    hung_stage: str | None = None                      # the stage that ran past its deadline
    container_exit: dict[str, Any] | None = None       # State of a container that died
    python: str = "python3"

    def add_line(self, line: str) -> bool:
        """Keep one output line; True when it was a stage result."""
        self.output.append(line)
        raw = result_of(line)
        if raw is not None:
            self.results.append(raw)
        return raw is not None


def result_of(line: str) -> dict[str, Any] | None:
    """The result a probe line carries, or None (a line that is no result, or a truncated one)."""
    if not line.startswith(RESULT_PREFIX):
        return None
    try:
        raw = without_surrogates(json.loads(line[len(RESULT_PREFIX):]))
    except (ValueError, RecursionError):
        return None
    return raw if isinstance(raw, dict) and "name" in raw else None


def where(raw: Mapping[str, Any]) -> str:
    """`container: NVIDIA H200 (sm_90)` for a stage that ran on a GPU, `host (cpu)` for one that did not."""
    mode = str(raw.get("where") or "container").split(" ")[0]
    return f"{mode}: {raw['gpu']} ({raw.get('arch') or 'arch unknown'})" if raw.get("gpu") else f"{mode} (cpu)"


def to_stage(raw: Mapping[str, Any]) -> StageResult:
    """One probe result -> a classified StageResult (a malformed one is a failed stage, not a crash)."""
    fields = {k: raw[k] for k in FIELDS if raw.get(k) is not None}
    try:
        stage = StageResult.model_validate({**fields, "where": where(raw)})
    except ValidationError as exc:
        return failed(str(raw.get("name", "probe")), f"the probe reported a malformed result: {exc.errors()[0]['msg']}",
                      None, log=json.dumps(dict(raw), default=str)[:2000])
    return classify.label(stage)


def interpret(run: ProbeRun, planned: Sequence[str], stage_timeout: float) -> list[StageResult]:
    """A probe run -> one classified StageResult per planned stage (hung, died and missing ones included)."""
    out = [to_stage(raw) for raw in run.results if raw.get("name") in planned]
    done = {s.name for s in out}
    rest = [s for s in planned if s not in done]
    if not rest:
        return out
    tail = "\n".join(line for line in run.output if not line.startswith(RESULT_PREFIX))[-4000:]
    current, why, cls = rest[0], "", None
    if run.hung_stage:
        why, cls = f"probe timed out: no result within {stage_timeout + grace(stage_timeout):.0f}s", "probe-timeout"
    elif run.container_exit is not None:
        exit_ = run.container_exit
        why = (f"container exited with status {exit_['status']} during this stage"
               + (" (out of memory)" if exit_.get("oom_killed") else ""))
        cls = "container-died"
    elif not out and run.exit_code not in (0, None):
        current = "probe"
        why = f"the probe could not run ({run.python} exited with status {run.exit_code})"
        if run.exit_code == 127:  # the shell found no such interpreter
            why, cls = f"{why}: {run.python}: not found", "no-python-in-container"
    else:
        why = f"the probe ended (status {run.exit_code}) before this stage reported"
    out.append(failed(current, why, cls, log=tail))
    out += [StageResult(name=s, status=Status.ABORTED, reason=f"not run: {current} did not finish") for s in rest[1:]]
    return out


def from_process(done: Completed, planned: Sequence[str], stage_timeout: float, *, python: str) -> list[StageResult]:
    """The stage results of a probe that ran as a process of ours (host mode, LXC): its output, its exit
    status, and the stage it was in when the whole run's deadline ended it."""
    run = ProbeRun(exit_code=done.returncode, python=python)
    for line in done.output.splitlines():
        run.add_line(line)
    if done.timed_out:
        reported = {r.get("name") for r in run.results}
        run.hung_stage = next((s for s in planned if s not in reported), "probe")
    return interpret(run, planned, stage_timeout)


def failed(name: str, reason: str, failure_class: str | None, *, log: str = "") -> StageResult:
    """A failed stage the host observed (the probe could not report it), classified."""
    stage = StageResult(name=name, status=Status.FAILED, reason=reason, log_excerpt=log[-4000:] or None,
                        where="host")
    if failure_class:
        stage = stage.model_copy(update={"failure_class": failure_class, "hint": classify.hint_for(failure_class)})
    return classify.label(stage)


def read_file(path: Path) -> list[dict[str, Any]]:
    """The JSON list of results that `python -m probe --out FILE` wrote."""
    try:
        data = without_surrogates(json.loads(path.read_text()))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, or bytes that are no UTF-8
        msg = f"cannot read probe output {path}: {exc}"
        raise ResultsError(msg, hint="pass the file the probe wrote with --out") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) and "name" in d for d in data):
        msg = f"{path} is not probe output (a JSON list of stage results)"
        raise ResultsError(msg, hint="pass the file the probe wrote with --out")
    return data
