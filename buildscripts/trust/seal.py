"""A cell's results record, sealed by the verifier that made it.

The seal is a DSSE envelope over the canonical JSON of the record (all of it but what later steps add:
the good tags applied and the registry references promoted, and the seal itself). `tag`, `promote`,
`export` and the reuse lookup act only on a record whose seal a trusted key made and whose content is
still what was sealed: a results file written or edited by hand, or by an image under test, earns
nothing. The sealed payload is read with the one strict reader (dsse.payload_json) like every signed payload:
a record holding keys equal but for case (which the code under test can put in its evidence) is never
sealed, and a seal over such a payload vouches for nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import log, results
from ..results import CellResult, RunResults
from . import dsse
from .keys import PublicKey, SigningKey

PAYLOAD_TYPE = "application/vnd.sglang-images.cell-results+json"
UNSEALED = frozenset({"tags", "promoted", "seal"})   # what tagging and promotion write after the seal


# Fields the record gained after records were first sealed: left out of the sealed form while unset, so that a
# record sealed before them still verifies (an unset field and an absent one say the same). Once set, they are sealed.
LATER = frozenset({"definition", "definition_digest", "notes", "carried"})
STAGE_LATER = frozenset({"sealed_by", "carried_from"})   # likewise in each stage entry
WRITTEN_NULL = frozenset({"definition", "definition_digest"})   # written as null while unset on 2026-12-04


def canonical(cell: CellResult, *, unset_written: bool = False) -> bytes:
    """The sealed form of `cell`; `unset_written`: with the WRITTEN_NULL fields written as null while unset, as the
    verifiers of 2026-12-04 sealed them before they were left out (both say the same, and both verify)."""
    data = cell.model_dump(mode="json", exclude=set(UNSEALED))
    for name in LATER:
        if data.get(name) is None and not (unset_written and name in WRITTEN_NULL):
            data.pop(name, None)
    for stage in data.get("stages") or []:
        for name in STAGE_LATER:
            if stage.get(name) is None:
                stage.pop(name, None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(cell: CellResult, key: SigningKey) -> CellResult:
    """`cell` with its seal (any earlier seal replaced)."""
    envelope = dsse.sign(canonical(cell), PAYLOAD_TYPE, key)
    return cell.model_copy(update={"seal": envelope})


def record(run: RunResults, cell: CellResult, key: SigningKey | None, path: Path, *,
           definition: Mapping[str, Any] | None = None) -> CellResult:
    """What every verifier of ours does with a cell it judged: seal it with the run's matrix digest and, for a cell
    of matrix.yaml, its cell's `definition` (matrix/definition.py: what the record counts for), add it to `run`,
    save the run. Only a verifier that judged the record seals it (the build, `verify`); a record
    made of what others report (`import-probe`), merged from several runs, or judged where the code under test
    could reach the keys (`key` None: verify/identity.py) is never sealed, so it is shown but vouches for
    nothing."""
    bound = cell.model_copy(update={
        "matrix_digest": run.matrix_digest, "seal": None, "definition": dict(definition) if definition else None,
        "definition_digest": results.definition_digest(definition) if definition else None,
        "stages": ran_here(cell.stages, run, None)})
    if key is not None and _readable(bound):
        sealed = seal(bound.model_copy(update={"stages": ran_here(cell.stages, run, key.public.keyid)}), key)
    else:
        sealed = bound
    run.cells.append(sealed)
    results.save(run, path)
    return sealed


def ran_here(stages: Sequence[results.StageResult], run: RunResults,
             keyid: str | None) -> list[results.StageResult]:
    """The stages with where they ran: a stage made in this run gets its run, its runner and the key that seals it
    (`keyid`, None when the record is not sealed); one stamped already (reused from a saved run, carried from the
    build runner's record: verify/carry.py) keeps what it says."""
    return [s if s.run_id or s.carried_from else
            s.model_copy(update={"run_id": run.run_id, "runner": run.runner, "sealed_by": keyid}) for s in stages]


def _readable(cell: CellResult) -> bool:
    """Whether the record reads one way to every reader (logged when not: it stays unsealed)."""
    try:
        dsse.payload_json(canonical(cell))
    except dsse.EnvelopeError as exc:
        log.warn(f"{cell.cell_id}: the results record is not sealed: {exc.message}")
        return False
    return True


def signer(cell: CellResult, trusted: Sequence[PublicKey]) -> PublicKey:
    """The trusted key that sealed this very record; dsse.EnvelopeError (naming the cell) when none did,
    or when the record differs from what was sealed."""
    if cell.seal is None:
        msg = f"{cell.cell_id}: the results record is not sealed by a verifier"
        raise dsse.EnvelopeError(msg, hint="records are sealed by the run that verified them; written by hand, "
                                           "or by a version before seals, it earns nothing: verify again")
    try:
        payload, key = dsse.verify(cell.seal, PAYLOAD_TYPE, trusted)
        dsse.payload_json(payload)
    except dsse.EnvelopeError as exc:
        msg = f"{cell.cell_id}: the results record's seal is not valid: {exc.message}"
        raise dsse.EnvelopeError(msg, hint=exc.hint) from None
    if payload not in (canonical(cell), canonical(cell, unset_written=True)):
        msg = f"{cell.cell_id}: the results record was changed after it was sealed ({_first_change(payload, cell)})"
        raise dsse.EnvelopeError(msg, hint="use the record as the verifier wrote it, or verify again")
    return key


def _first_change(payload: bytes, cell: CellResult) -> str:
    """Which top-level field differs, for the message."""
    try:
        sealed = dsse.payload_json(payload)
        now = dsse.payload_json(canonical(cell))
    except dsse.EnvelopeError as exc:
        return exc.message
    if not isinstance(sealed, dict) or not isinstance(now, dict):
        return "the sealed payload is not a record"
    changed = sorted(k for k in set(sealed) | set(now) if sealed.get(k) != now.get(k))
    return "changed: " + ", ".join(changed) if changed else "the same fields, written differently"
