"""Results reuse: a verification whose every input is unchanged is not run again.

A verification's outcome depends on the image (its id), the probe's code, the host's code that judges
what the probe reports (claims, the observed server stages, the reference decode), the plan (stages, target
archs, lane, stage timeout, server profile) and the GPU its GPU stages run on (model, arch, driver,
how the engine hands it over; or why there is none), and the failure catalogue that classifies a failed
stage. `key()` hashes exactly these; the pipeline stores the key with each cell's record, and `find()`
looks through the saved runs for the newest record of the same cell with the same key, sealed by a
trusted verifier (trust/seal.py): anyone can compute the key, only a verifier of ours can seal. Only
settled outcomes are reused (verified, cpu-checked, an expected failure): a failure or an unexpected
pass is verified again, since a user re-runs to retry those. The caller judges the reused stages again
against the current expectations and verifies again unless the outcome is still settled. `--reverify` skips the lookup.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .. import log
from ..errors import ResultsError
from ..results import CellResult, RunResults, StageResult, Verdict, load
from ..trust import seal
from ..trust.dsse import EnvelopeError
from ..trust.keys import PublicKey
from . import tp
from .classify import CATALOGUE
from .gpus import Discovery
from .plan import Plan
from .probe_source import PROBE_SOURCE

SETTLED = (Verdict.VERIFIED, Verdict.CPU_CHECKED, Verdict.EXPECTED_FAILURE)
HISTORY = 50   # saved runs looked through, newest first: older results are verified again


# The host's side of a verdict: GPU facts, the server stages it observes, its model and reference decode.
JUDGES = ("claims.py", "driver.py", "served.py", "handoff.py", "observe.py", "host_model.py", "reference.py",
          "hybrid.py", "tp.py")


def _digest(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@cache
def probe_digest(source: Path = PROBE_SOURCE) -> str:
    """sha256 over the probe package's files (what runs inside the image)."""
    return _digest(source.glob("*.py"))


@cache
def judge_digest() -> str:
    """sha256 over the host's modules that make the GPU stages' results (JUDGES)."""
    return _digest(Path(__file__).with_name(name) for name in JUDGES)


@cache
def catalogue_digest() -> str:
    """sha256 of the failure catalogue: the classes a failed stage gets (and an expectation matches)."""
    return hashlib.sha256(CATALOGUE.read_bytes()).hexdigest()


def gpu_identity(discovery: Discovery, gpu: int, per_gpu: bool, all_gpus: bool = False) -> dict[str, object]:
    """The GPU side of the key: the GPU(s) the stages would run on (every one for a tensor-parallel profile,
    whose tp size they make), or why none can."""
    if not discovery.usable_in_containers:
        return {"gpu": None, "problem": discovery.problem}
    chosen = [g for g in discovery.gpus if per_gpu or all_gpus or g.index == gpu]
    return {"runtime": discovery.runtime, "per_gpu": per_gpu,
            "gpus": [{"name": g.name, "arch": g.arch, "driver": g.driver, "memory_mib": g.memory_mib}
                     for g in chosen]}


def key(image_id: str, plan: Plan, discovery: Discovery, *, gpu: int = 0, per_gpu: bool = False) -> str:
    """sha256 of everything a verification's outcome depends on."""
    inputs = {"image": image_id, "probe": probe_digest(), "judge": judge_digest(), "catalogue": catalogue_digest(),
              "stages": list(plan.stages), "archs": list(plan.archs), "also_archs": list(plan.also_archs),
              "lane_cuda": plan.lane_cuda, "stage_timeout": plan.stage_timeout,
              "server_args": list(plan.server_args), "server_env": dict(plan.server_env),
              "server_profile": plan.server_profile, "server_model": plan.server_model,
              "gpu": gpu_identity(discovery, gpu, per_gpu, all_gpus=tp.wants_all_gpus(plan.server_args))}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Reused:
    """A saved record that may stand for this run's verification, and the run it came from."""

    record: CellResult
    run: RunResults

    @property
    def when(self) -> str:
        return self.record.finished or self.run.finished or self.run.started

    def stages(self) -> list[StageResult]:
        """The saved stages, each stamped with where and when it really ran (kept if stamped already)."""
        return [s if s.run_id else s.model_copy(update={"run_id": self.run.run_id, "runner": self.run.runner,
                                                         "finished": self.when})
                for s in self.record.stages]

    def origin(self) -> str:
        return f"run {self.run.run_id} of {self.when} on {self.run.runner}"


def saved_runs(runs: Path, *, skip: str = "", newest: int = HISTORY) -> list[RunResults]:
    """The `newest` saved runs under `runs/`, newest first. Unreadable files, and runs removed while
    they are read, are passed over: `nox -s report` names broken files, and a build must not fail
    because of an old run."""
    dated = []
    for path in runs.glob("*/results.json"):
        try:
            if path.parent.name != skip:
                dated.append((path.stat().st_mtime, path))
        except OSError:
            continue
    found = []
    for _, path in sorted(dated, reverse=True)[:newest]:
        try:
            found.append(load(path))
        except ResultsError:
            continue
    return found


def find(history: Iterable[RunResults], cell_id: str, verification_key: str,
         trusted: Sequence[PublicKey]) -> Reused | None:
    """The newest saved, settled record of `cell_id` made with exactly this key (`history`: newest first)
    and sealed by a trusted key over exactly what it holds. The key is computable by anyone, so a record
    that carries it proves nothing by itself: an unsealed or edited one is passed over, with a warning."""
    for run in history:
        record = run.cell(cell_id)
        if record and record.verification_key == verification_key and record.verdict in SETTLED:
            try:
                seal.signer(record, trusted)
            except EnvelopeError as exc:
                log.warn(f"{exc.message} (saved in run {run.run_id}): not reused")
                continue
            return Reused(record, run)
    return None
