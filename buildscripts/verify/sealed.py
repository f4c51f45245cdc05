"""A `verify` run's record, as its request says to keep it: sealed with this verifier's key into the results file
(trust/seal.py), or left unsealed, with why, where the run vouches for nothing; and for an image verified by
digest, the verdict of each GPU arch signed for the promote job (trust/verdicts.py)."""

from __future__ import annotations

from .. import log
from ..results import CellResult, RunResults, matrix_digest, now
from ..trust import seal, verdicts
from .request import VerificationRequest
from .reuse import probe_digest


def sealed(request: VerificationRequest, cell: CellResult, unsealed: str | None = None) -> CellResult:
    """`cell` saved in the request's results file, sealed unless the request, or `unsealed` (found while it ran),
    says why it must not be."""
    sealing = request.sealing
    assert sealing is not None, "a request of `verify` says who seals its record"
    unsealed = sealing.unsealed or unsealed
    matrix = sealing.matrix
    run = RunResults(run_id=request.run_id, started=sealing.started, finished=now(), matrix=str(matrix.path),
                     matrix_digest=matrix_digest(matrix.spec))
    named = matrix.cell(cell.cell_id)   # a record of a matrix cell counts while its definition holds
    cell = seal.record(run, cell, None if unsealed else sealing.signing, sealing.results,
                       definition=named.definition if named else None)
    if unsealed:
        log.warn(f"{cell.cell_id}: the record is not sealed, so it vouches for nothing: {unsealed}")
    if cell.image.subject:   # verified by digest: the verdict of each GPU arch, signed for the promote job
        verdicts.sign_verdicts(cell, sealing.results.parent, image=cell.image.subject, matrix=matrix.path,
                               probe=probe_digest(), env=request.env)
    return cell
