"""CPU stages carried from the build runner: a GPU runner runs only the GPU stages of a digest whose CPU stages the
build runner's sealed record passed (`verify --cpu-record RESULTS`; docs/trust.md, "CPU stages carried").

A record vouches for a digest only under the key that sealed it. So a record is carried only when all of this
holds, looked at in this order; else the GPU runner runs the CPU stages itself, as without it, and says why:
- a key this verifier trusts sealed exactly this record (trust/seal.py: keys/*.pub, its own, --trust-key), so
  nothing in it changed since;
- it judged the very image verified here: its platform manifest digest is the one pulled (never a tag, an image
  id or a name; an image verified by digest only);
- it is a record of the cell verified here, whose definition (matrix/definition.py, as the gate compares it) is
  unchanged since, and it was planned for the targets and the lane planned here;
- every CPU stage planned here has exactly one entry there, and it passed: a CPU stage that failed means no GPU
  job, and one skipped or aborted vouches for nothing.
The carried entries are judged as if they had run here (results.judge reads no provenance); each says where it
ran and under which key, and the record keeps the carried envelope (`carried`), so they can be checked again
without the file they came from (trust/cpu_record.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError, ResultsError
from ..matrix import Cell
from ..matrix import definition as definitions
from ..results import CPU_STAGES, LADDER, CarriedRecord, CellResult, ImageInfo, RunResults, StageResult, Status, load
from ..trust import cpu_record
from ..trust.keys import PublicKey
from .plan import Plan

MOST_SAID = 3   # refused records said per refusal: a file of a whole matrix's build holds one per cell


@dataclass(frozen=True)
class Offered:
    """A results file given with --cpu-record, read before the pull."""

    path: Path
    run: RunResults


@dataclass(frozen=True)
class Carried:
    """The build runner's record accepted here: the CPU stages it stands for, each stamped with where it ran."""

    entry: CarriedRecord
    stages: tuple[StageResult, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)

    @property
    def said(self) -> str:
        """One line for the console."""
        return (f"CPU stages carried from {self.entry.run_id or 'a run'} ({cpu_record.short(self.entry.keyid)}, "
                f"{self.entry.key}): {', '.join(self.names)}")


def read(paths: Sequence[Path]) -> tuple[Offered, ...]:
    """Each file given, read now, before the pull: one that is no results file is a ConfigError naming it."""
    found = []
    for path in paths:
        try:
            found.append(Offered(path, load(path)))
        except ResultsError as exc:
            msg = f"--cpu-record {exc.message}"
            raise ConfigError(msg, hint="give the build runner's results.json (the artifact cpu-records-JOB in CI), "
                                        "or leave --cpu-record out to run the CPU stages here") from None
    return tuple(found)


def choose(offered: Sequence[Offered], *, pulled: ImageInfo | None, cell: Cell | None, plan: Plan,
           trusted: Sequence[PublicKey]) -> Carried | str:
    """The record among `offered` that may stand for the CPU stages of this verification, or why none may (one
    line, for the console and the record's notes)."""
    digest = (pulled.platform_digest or pulled.digest) if pulled else None
    if digest is None:
        return "the image was not pulled by digest here, so no record can be held to it"
    candidates = [(o, r) for o in offered for r in o.run.cells if cpu_record.manifest(r) == digest]
    if not candidates:
        files = ", ".join(str(o.path) for o in offered)
        return f"no record in {files} judged the platform manifest {digest}"
    reasons = []
    for each, record in candidates:
        found = _carried(record, each.run, digest=digest, cell=cell, plan=plan, trusted=trusted)
        if isinstance(found, Carried):
            return found
        reasons.append(f"{each.path} ({record.cell_id}): {found}")
    more = f"; and {len(reasons) - MOST_SAID} more" if len(reasons) > MOST_SAID else ""
    return "; ".join(reasons[:MOST_SAID]) + more


def _carried(record: CellResult, run: RunResults, *, digest: str, cell: Cell | None, plan: Plan,
             trusted: Sequence[PublicKey]) -> Carried | str:
    """`record` carried, or why not: its seal first (nothing it says counts before), then its cell, then its stages."""
    signer = cpu_record.signer_of(record, trusted)
    if isinstance(signer, str):
        return signer
    why = _not_this_cell(record, cell, plan)
    if why:
        return why
    planned = [name for name in plan.stages if name in CPU_STAGES]
    stages = []
    for name in planned:
        entries = [s for s in record.stages if s.name == name]
        if len(entries) != 1:
            return f"it holds {len(entries)} results of the CPU stage {name}, not one"
        if entries[0].status is not Status.PASSED:
            return (f"its {name} stage {entries[0].status.value}"
                    + (f" ({entries[0].failure_class or entries[0].reason})" if entries[0].reason else "")
                    + ": a CPU stage that did not pass vouches for no GPU job")
        stages.append(entries[0])
    entry = CarriedRecord(cell_id=record.cell_id, run_id=record.run_id or run.run_id,
                          runner=record.runner or run.runner, digest=digest, keyid=signer.keyid, key=signer.name,
                          stages=planned, seal=dict(record.seal or {}))
    origin = cpu_record.origin(entry)
    return Carried(entry, tuple(s.model_copy(update={
        "carried_from": origin, "sealed_by": signer.keyid, "run_id": s.run_id or entry.run_id,
        "runner": s.runner or entry.runner, "finished": s.finished or record.finished}) for s in stages))


def _not_this_cell(record: CellResult, cell: Cell | None, plan: Plan) -> str | None:
    """Why `record` is not of the cell verified here as planned here (None: it is)."""
    if cell is None:
        return "the image is verified as no cell of matrix.yaml here, so no cell definition holds the record to it"
    if record.cell_id != cell.id:
        return f"it is a record of {record.cell_id}, not of {cell.id}"
    if record.definition_digest is None:
        return "it names no cell definition (made before records did)"
    stale = definitions.stale(record, cell, "")
    if stale:
        return stale
    if list(record.targets) != list(plan.archs):
        return f"its stages were planned for {' '.join(record.targets)}, here for {' '.join(plan.archs)}"
    if plan.lane_cuda != cell.lane.cuda_version:
        return f"its stages were planned for the cell's lane (CUDA {cell.lane.cuda_version}), here for {plan.lane_cuda}"
    return None


def without(plan: Plan, carried: Carried | None) -> Plan:
    """The plan less the stages carried: what still runs here."""
    if carried is None:
        return plan
    return replace(plan, stages=tuple(s for s in plan.stages if s not in carried.names))


def merged(ran: Sequence[StageResult], carried: Carried | None) -> list[StageResult]:
    """The carried stages and those run here, in ladder order (a stage the host made, `image` or `probe` when
    nothing could run, keeps its place after them)."""
    if carried is None:
        return list(ran)
    order = {name: index for index, name in enumerate(LADDER)}
    both = [*carried.stages, *ran]
    return sorted(both, key=lambda s: order.get(s.name, len(order)))
