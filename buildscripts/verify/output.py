"""The one reader of probe output: result lines (streamed from a container or a host process, or a JSON
file the probe wrote) become classified StageResults, with hung, dead and missing stages spelled out. Which
lines count is stagelines.py's rule: exactly one entry per stage asked for, in order; the rest are refused and
noted on the entries (evidence `refused_lines`). Where a stage ran is the runner's knowledge (`mode`), never the
line's."""

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
from .stagelines import REFUSED, StageLines

FIELDS = ("name", "status", "duration_s", "reason", "evidence", "log_excerpt", "gpu", "arch")


@dataclass
class ProbeRun:
    """What came back from one probe run, before it is turned into stage results."""

    lines: StageLines                                  # the results kept, one per planned stage, and those refused
    output: list[str] = field(default_factory=list)   # every line, results included
    exit_code: int | None = None
    hung_stage: str | None = None                      # the stage that ran past its deadline
    container_exit: dict[str, Any] | None = None       # State of a container that died
    python: str = "python3"
    mode: str = "container"                            # where the runner ran it: container, host or lxc

    @classmethod
    def of(cls, planned: Sequence[str], **kwargs: Any) -> ProbeRun:
        return cls(StageLines(tuple(planned)), **kwargs)

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.lines.accepted

    def add_line(self, line: str) -> bool:
        """Keep one output line; True when it was the result of the stage due (a refused one is noted)."""
        self.output.append(line)
        raw = result_of(line)
        return raw is not None and self.lines.offer(raw)


def result_of(line: str) -> dict[str, Any] | None:
    """The result a probe line carries, or None (a line that is no result, or a truncated one)."""
    if not line.startswith(RESULT_PREFIX):
        return None
    try:
        raw = without_surrogates(json.loads(line[len(RESULT_PREFIX):]))
    except (ValueError, RecursionError):
        return None
    return raw if isinstance(raw, dict) and "name" in raw else None


def where(raw: Mapping[str, Any], mode: str | None = None) -> str:
    """`container: NVIDIA H200 (sm_90)` for a stage that ran on a GPU, `host (cpu)` for one that did not; `mode`
    is the runner's (a file of results from elsewhere says its own)."""
    mode = mode or str(raw.get("where") or "container").split(" ")[0]
    return f"{mode}: {raw['gpu']} ({raw.get('arch') or 'arch unknown'})" if raw.get("gpu") else f"{mode} (cpu)"


def to_stage(raw: Mapping[str, Any], mode: str | None = None) -> StageResult:
    """One probe result -> a classified StageResult (a malformed one is a failed stage, not a crash). Its
    evidence never keeps a `refused_lines` of its own: that key is the host's (with_notes)."""
    fields = {k: raw[k] for k in FIELDS if raw.get(k) is not None}
    if isinstance(fields.get("evidence"), dict):
        fields["evidence"] = {k: v for k, v in fields["evidence"].items() if k != REFUSED}
    try:
        stage = StageResult.model_validate({**fields, "where": where(raw, mode)})
    except ValidationError as exc:
        return failed(str(raw.get("name", "probe")), f"the probe reported a malformed result: {exc.errors()[0]['msg']}",
                      None, log=json.dumps(dict(raw), default=str)[:2000])
    return classify.label(stage)


def interpret(run: ProbeRun, stage_timeout: float) -> list[StageResult]:
    """A probe run -> one classified StageResult per planned stage (hung, died and missing ones included), the
    lines it refused noted on them."""
    out = _entries(run, stage_timeout)
    return with_notes(out, run.lines)


def with_notes(entries: list[StageResult], lines: StageLines) -> list[StageResult]:
    """`entries` with the notes on refused lines in the evidence of the entry each goes with."""
    notes = lines.notes_for([s.name for s in entries])
    return [s.model_copy(update={"evidence": {**s.evidence, REFUSED: notes[s.name]}}) if s.name in notes else s
            for s in entries]


def _entries(run: ProbeRun, stage_timeout: float) -> list[StageResult]:
    out = [to_stage(raw, run.mode) for raw in run.results]
    rest = list(run.lines.planned[len(out):])
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


def from_process(done: Completed, planned: Sequence[str], stage_timeout: float, *, python: str,
                 mode: str) -> list[StageResult]:
    """The stage results of a probe that ran as a process of ours (host mode, LXC): its output, its exit
    status, and the stage it was in when the whole run's deadline ended it."""
    run = ProbeRun.of(planned, exit_code=done.returncode, python=python, mode=mode)
    for line in done.output.splitlines():
        run.add_line(line)
    if done.timed_out:
        run.hung_stage = run.lines.due or "probe"
    return interpret(run, stage_timeout)


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
