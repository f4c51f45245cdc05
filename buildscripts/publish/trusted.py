"""The one gate between a results file and anything that vouches for an image (`tag`, `promote`, `export`,
the build's tag step).

Stable names (other modules and branches build on them):
  sift(run, matrix, keys, only=()) -> list[Trusted | Refused]   every selected cell of a run, in file order
  check(record, position, matrix, keys) -> Trusted | Refused   one cell record
  earned(runs, matrix, keys) -> list[Trusted]                  the cells of runs that earned good tags
  refuse(checked, path)                                        ResultsError naming each Refused, if any
  check_run(run, path, matrix_path, matrix, allow_other)       the matrix the file was made from
  add_arguments(parser) / keys_from(args, ws, env)             --trust-key and --allow-other-matrix
  Trusted(position, record, cell, judged, signer)              a record let through, judged here
       .why_not (None: earns good tags)  .archs (`sm90` …)  .gpus  .every_arch  .image_id  .cell_id
  Refused(position, cell_id, reason)  .why_not (the reason)
  IMAGE_ID                                                    a full image id: sha256: and 64 hex digits

A record is evidence only when all of this holds; else the cell is refused with the reason, and never tagged:
- a trusted key sealed exactly this record (trust/seal.py: a verifier of ours made it, nothing changed since);
- its cell id is a cell of matrix.yaml, and the axes it records are that cell's: tags are rendered from the
  matrix cell, so a record can never give one version's image another version's tags;
- it is judged again (`results.judge`) with the matrix cell's targets, excluded reason and expected failure,
  and a GPU stage counts only where a GPU name and arch are recorded (the host fills those: what it handed
  over). The judgement is made here, once, and passed along in `Trusted.judged`;
- when that judgement earns a good tag, its image id is a full `sha256:` digest of 64 hex digits (no short
  id, no host or LXC "image").
A Refused record is no evidence (bad input: `refuse` makes it an error before anything is tagged or pushed);
a Trusted one may still earn nothing (`why_not`: not verified on a GPU of a target arch).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import arguments, results
from ..errors import ResultsError
from ..matrix import Cell, Matrix
from ..results import GPU_STAGES, CellResult, RunResults, StageResult, Status, Verdict, family, tag_form
from ..trust import dsse, keys, seal
from ..trust.keys import PublicKey
from ..workspace import Workspace

IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
NO_GPU_RECORDED = "passed, but no GPU name and arch are recorded for it: it did not run on a GPU the verifier saw"


@dataclass(frozen=True)
class Refused:
    """A cell the gate turned away, and why (one line, for the step log and the error)."""

    position: int
    cell_id: str
    reason: str

    @property
    def why_not(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Trusted:
    """A sealed record of a matrix cell, judged here with the matrix's facts."""

    position: int            # in run.cells: where tag and promote write back what they did
    record: CellResult       # the record as the file holds it (its seal checked)
    cell: Cell               # the matrix cell: axes and targets come from here
    judged: CellResult       # the record with the matrix's axes, targets and expectation, judged again
    signer: PublicKey

    @property
    def cell_id(self) -> str:
        return self.record.cell_id

    @property
    def image_id(self) -> str:
        """The tested image: a full `sha256:` id whenever the record earns a good tag (checked by `check`)."""
        return self.record.image.id or ""

    @property
    def archs(self) -> list[str]:
        """The archs verified in this very image, as tags spell them (`sm90`): judged, less any whose GPU
        stages ran in another build of the same inputs (a record merged from another runner)."""
        return [tag_form(arch) for arch in self.judged.verified_archs if _ran_in(self.judged, arch)]

    @property
    def gpus(self) -> list[str]:
        """The GPUs the archs of `archs` were verified on (names as recorded by the host)."""
        return sorted({s.gpu for s in self.judged.stages if s.name in GPU_STAGES and s.gpu and s.arch
                       and tag_form(s.arch) in self.archs})

    @property
    def why_not(self) -> str | None:
        """None when the cell earns a good tag on one arch at least, else why it earns none."""
        if not self.judged.verified_archs:
            return f"verdict {self.judged.verdict.value}: {self.judged.verdict_reason}"
        if not self.archs:
            return (f"{self.judged.verdict_reason}, but in another build of the same inputs, not in the image "
                    f"{self.image_id}; a good tag vouches for the image that ran")
        return None

    @property
    def every_arch(self) -> bool:
        """No GPU stage failed on any arch: what an arch-less good tag says."""
        return self.judged.verdict is Verdict.VERIFIED


def _ran_in(cell: CellResult, arch: str) -> bool:
    return all(s.image_id in (None, cell.image.id) for s in cell.stages
               if s.name in GPU_STAGES and s.arch and family(s.arch) == family(arch))


def check(record: CellResult, position: int, matrix: Matrix, trusted: Sequence[PublicKey]) -> Trusted | Refused:
    """The gate for one record: Trusted with its judgement, or Refused with the reason."""
    def refused(reason: str) -> Refused:
        return Refused(position, record.cell_id, reason)

    try:
        signer = seal.signer(record, trusted)
    except dsse.EnvelopeError as exc:
        return refused(exc.message.removeprefix(f"{record.cell_id}: "))
    cell = next((c for c in matrix.cells if c.id == record.cell_id), None)
    if cell is None:
        return refused(f"{record.cell_id!r} is no cell of {matrix.path}: its tags cannot be named")
    if record.axes != cell.axes():
        differ = sorted(k for k in set(record.axes) | set(cell.axes()) if record.axes.get(k) != cell.axes().get(k))
        return refused(f"the record's axes are not those of the cell in {matrix.path} (they differ in "
                       f"{', '.join(differ)}): it is a record of another cell or another matrix")
    judged = results.judged(record.model_copy(update={
        "axes": cell.axes(), "targets": list(cell.archs), "excluded": cell.excluded,
        "expected": cell.expected_failure(), "stages": [_gpu_checked(s) for s in record.stages]}))
    image_id = record.image.id or ""
    if judged.verified_archs and not IMAGE_ID.fullmatch(image_id):  # what earns nothing needs no image
        what = f"{image_id!r} is" if image_id else "no image id is recorded, which is"
        return refused(f"{what} not a full image id (sha256: and 64 hex digits): nothing identifies "
                       "the image that was tested (a host or LXC run has no image to tag)")
    return Trusted(position, record, cell, judged, signer)


def refuse(checked: Sequence[Trusted | Refused], where: Path) -> None:
    """ResultsError naming every refused record of `where`, before anything is tagged or pushed: a record
    that is no evidence is bad input, not a cell that merely earned nothing."""
    refused = [c for c in checked if isinstance(c, Refused)]
    if refused:
        listed = "; ".join(f"{c.cell_id}: {c.reason}" for c in refused)
        msg = f"{len(refused)} record(s) of {where} are not evidence: {listed}"
        raise ResultsError(msg, hint="only records a verifier of this project sealed, of cells of matrix.yaml, "
                                     "count; verify again, or leave these out with --only")


def _gpu_checked(stage: StageResult) -> StageResult:
    """A passed GPU stage without the GPU's name and arch counts as skipped: nothing says a GPU ran it."""
    if stage.name not in GPU_STAGES or stage.status is not Status.PASSED or (stage.gpu and stage.arch):
        return stage
    return stage.model_copy(update={"status": Status.SKIPPED, "reason": NO_GPU_RECORDED, "arch": None})


def sift(run: RunResults, matrix: Matrix, trusted: Sequence[PublicKey],
         only: Sequence[str] = ()) -> list[Trusted | Refused]:
    """Every cell of `run` an `only` glob selects (all when none), through the gate, in file order."""
    return [check(cell, i, matrix, trusted) for i, cell in enumerate(run.cells)
            if arguments.selected(cell.cell_id, only)]


def earned(runs: Iterable[RunResults], matrix: Matrix, trusted: Sequence[PublicKey]) -> list[Trusted]:
    """The cells of `runs` the gate lets through that earned a good tag, in the order of `runs`."""
    return [c for run in runs for c in sift(run, matrix, trusted) if isinstance(c, Trusted) and c.why_not is None]


def check_run(run: RunResults, path: Path, matrix_path: Path, matrix: Matrix, *, allow_other: bool) -> str | None:
    """The file was made from this matrix.yaml (ResultsError else, a missing digest included, unless
    `allow_other`); a warning to show when it was not and `allow_other` lets it through."""
    return results.check_matrix(run, path, matrix_path, results.matrix_digest(matrix.spec), allow_other=allow_other,
                                allow_unknown=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--trust-key and --allow-other-matrix, the same for every command that acts on records."""
    parser.add_argument("--trust-key", action="append", default=[], type=Path, metavar="PUB",
                        help="also trust records sealed by this public key (repeatable; keys/*.pub and this "
                             "machine's verifier key are trusted always)")
    arguments.add_allow_other_matrix(parser)


def keys_from(args: argparse.Namespace, ws: Workspace, env: Mapping[str, str]) -> list[PublicKey]:
    """The keys whose seals count: the project's, this verifier's, and every --trust-key."""
    return keys.trusted(ws.root, env, args.trust_key)
