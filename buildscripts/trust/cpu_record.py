"""The build runner's record a GPU runner's record carries (results `carried`, verify/carry.py), checked again from
the envelope the record keeps: without the file it came from, anyone with the keys can see that a trusted key
sealed the carried stages, of this very digest, as the record shows them.

The GPU runner's seal covers the whole record, the carried envelope and entries included: what this adds is that a
carried stage counts only while its own record's key is trusted too. A record vouches for a digest only under the
key that sealed it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from ..results import CarriedRecord, CellResult
from . import dsse, seal
from .keys import PublicKey

# What the carrying verifier adds to a carried stage's entry: where it ran and under which key (verify/carry.py).
PROVENANCE = frozenset({"carried_from", "sealed_by", "run_id", "runner", "finished"})


def short(keyid: str) -> str:
    """A keyid as messages name it."""
    return f"key {keyid[:16]}"


def origin(entry: CarriedRecord) -> str:
    """What a carried stage's `carried_from` says: the record, the digest and the key."""
    return (f"carried from the record of run {entry.run_id or '?'} (cell {entry.cell_id}, {entry.digest}) "
            f"sealed by {short(entry.keyid)}")


def signer_of(record: CellResult, trusted: Sequence[PublicKey]) -> PublicKey | str:
    """The trusted key that sealed this very record, else why none did (one line, without the cell id)."""
    try:
        return seal.signer(record, trusted)
    except dsse.EnvelopeError as exc:
        return exc.message.removeprefix(f"{record.cell_id}: ")


def opened(entry: CarriedRecord, trusted: Sequence[PublicKey]) -> CellResult | str:
    """The carried record as its envelope holds it, when a trusted key sealed it; else why not."""
    try:
        payload, _ = dsse.verify(entry.seal, seal.PAYLOAD_TYPE, trusted)
        data = dsse.payload_json(payload)
        record = CellResult.model_validate({**data, "seal": entry.seal}) if isinstance(data, dict) else None
    except dsse.EnvelopeError as exc:
        return f"the carried record's seal is not valid: {exc.message}"
    except ValidationError as exc:
        return f"the carried envelope holds no results record ({exc.errors()[0]['msg']})"
    if record is None:
        return "the carried envelope holds no results record"
    found = signer_of(record, trusted)
    if isinstance(found, str):
        return found
    return record if found.keyid == entry.keyid else f"the carried record is sealed by {short(found.keyid)}, " \
                                                     f"not by {short(entry.keyid)} as the record says"


def manifest(cell: CellResult) -> str | None:
    """The platform manifest digest a record judged: of the platform that ran, for an index."""
    return cell.image.platform_digest or cell.image.digest


def recheck(cell: CellResult, trusted: Sequence[PublicKey]) -> str | None:
    """Why the stages `cell` carries do not stand (None: they do, or it carries none): the carried envelope is not
    one a trusted key sealed, names another key or digest, or a carried stage is not as that record holds it."""
    entry = cell.carried
    carried = [s for s in cell.stages if s.carried_from]
    if entry is None:
        return f"{carried[0].name} says it is carried, but the record carries no record" if carried else None
    record = opened(entry, trusted)
    if isinstance(record, str):
        return record
    theirs, ours = manifest(record), manifest(cell)
    if not entry.digest == theirs == ours:
        return f"the carried record is of {theirs}, this one of {ours}, and it says {entry.digest}"
    if [s.name for s in carried] != entry.stages:
        return f"the stages marked carried ({', '.join(s.name for s in carried)}) are not those carried"
    for stage in carried:
        held = record.stage(stage.name)
        if held is None or held.model_dump(exclude=set(PROVENANCE)) != stage.model_dump(exclude=set(PROVENANCE)):
            return f"the carried {stage.name} is not as the record of {entry.run_id} holds it"
        if stage.sealed_by != entry.keyid:
            return f"the carried {stage.name} names another key than the one that sealed its record"
    return None
