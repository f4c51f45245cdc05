"""The one gate between a results file and anything that vouches for an image (`tag`, `promote`, `export`,
the build's tag step).

Stable names (other modules and branches build on them):
  sift(run, matrix, keys, only=()) -> list[Trusted | Refused]   every selected cell of a run, in file order
  check(record, position, matrix, keys) -> Trusted | Refused   one cell record
  earned(runs, matrix, keys) -> list[Trusted]                  the cells of runs that earned good tags
  refuse(checked, path)                                        ResultsError naming each Refused, if any
  Trusted(position, record, cell, judged, signer)              a record let through, judged here
       .why_not (None: earns good tags)  .archs (`sm90` …)  .gpus  .every_arch  .image_id  .cell_id
  Refused(position, cell_id, reason)  .why_not (the reason)
  IMAGE_ID                                                    a full image id: sha256: and 64 hex digits

What a record is worth is judged in one place, buildscripts/gate.py (sealed by a trusted key, a cell of
matrix.yaml with its axes, its cell's definition unchanged since, of its cell's image, judged again, a full image
id where it earns a tag); this module is that gate as the commands that act on records use it: over a whole file
and their selection. A file of another matrix.yaml is read like any other: each record counts while its own cell's
definition holds, and a stale one earns nothing: verify it again. (`--trust-key` is arguments.add_trust_keys.)
A Refused record is no evidence (bad input: `refuse` makes it an error before anything is tagged or pushed);
a Trusted one may still earn nothing (`why_not`: not verified on a GPU of a target arch).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import ResultsError
from ..gate import IMAGE_ID, NO_GPU_RECORDED, Refused, Trusted, check
from ..matrix import Matrix, selected
from ..results import RunResults
from ..trust.keys import PublicKey

__all__ = ["IMAGE_ID", "NO_GPU_RECORDED", "Refused", "Trusted", "check", "earned", "refuse", "sift"]


def refuse(checked: Sequence[Trusted | Refused], where: Path) -> None:
    """ResultsError naming every refused record of `where`, before anything is tagged or pushed: a record
    that is no evidence is bad input, not a cell that merely earned nothing."""
    refused = [c for c in checked if isinstance(c, Refused)]
    if refused:
        listed = "; ".join(f"{c.cell_id}: {c.reason}" for c in refused)
        msg = f"{len(refused)} record(s) of {where} are not evidence: {listed}"
        raise ResultsError(msg, hint="only records a verifier of this project sealed, of cells of matrix.yaml, "
                                     "count; verify again, or leave these out with --only")


def sift(run: RunResults, matrix: Matrix, trusted: Sequence[PublicKey],
         only: Sequence[str] = ()) -> list[Trusted | Refused]:
    """Every cell of `run` an `only` glob selects (all when none), through the gate, in file order."""
    return [check(cell, i, matrix, trusted, file_digest=run.matrix_digest)
            for i, cell in enumerate(run.cells) if selected(cell.cell_id, only)]


def earned(runs: Iterable[RunResults], matrix: Matrix, trusted: Sequence[PublicKey]) -> list[Trusted]:
    """The cells of `runs` the gate lets through that earned a good tag, in the order of `runs`."""
    return [c for run in runs for c in sift(run, matrix, trusted)
            if isinstance(c, Trusted) and c.why_not is None]
