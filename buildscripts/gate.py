"""What a results record is worth: the one judgement behind `tag`, `promote`, `export`, the build's tag step
(through publish/trusted.py) and every report (report/weigh.py).

A record is evidence only when all of this holds:
- a trusted key sealed exactly this record (trust/seal.py: a verifier of ours made it, nothing changed since),
  and the record it carries CPU stages from, if any, as it shows them (trust/cpu_record.py);
- its cell id is a cell of matrix.yaml, and the axes it records are that cell's: tags are rendered from the
  matrix cell, so a record can never give one version's image another version's tags;
- its cell's definition is what it was when the record was made (matrix/definition.py `stale`; editing another
  cell, lane or platform changes nothing here); a record made before definitions were recorded counts while the
  whole matrix.yaml it was judged with is today's;
- the image it judged is a build of that cell (`foreign`: the image's own cell, axes, inputs and platform
  labels), never another image verified under the cell's name;
- it is judged again (`results.judge`) with the matrix cell's targets, excluded reason and expected failure,
  and a GPU stage counts only where a GPU name and arch are recorded (the host fills those: what it handed
  over). The judgement is made here, once, and passed along in `Trusted.judged`;
- when that judgement earns a good tag, its image id is a full `sha256:` digest of 64 hex digits (no short
  id, no host or LXC "image").

`check` applies all of it (the gate of what vouches for an image). `weigh` applies the same steps to say what a
record is worth to a reader: the marks it earns (unsealed, a seal no trusted key made, another matrix, GPU
stages the probe reported itself, judged by older rules) and its judgement; a record with no mark is one the
gate would let through, so only it may be shown as verified. A run that is no cell of matrix.yaml (host mode,
in place in LXC) names no tag, so for a reader it is judged with the targets it recorded, and only needs no
full image id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from . import results
from .matrix import Cell, Matrix
from .matrix import definition as definitions
from .matrix.platforms import DEFAULT as DEFAULT_PLATFORM
from .matrix.schema import LABEL_PREFIX
from .results import GPU_STAGES, CellResult, StageResult, Status, Verdict, family, tag_form
from .trust import cpu_record, dsse, seal
from .trust.keys import PublicKey

IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
NO_GPU_RECORDED = "passed, but no GPU name and arch are recorded for it: it did not run on a GPU the verifier saw"
# What the verifier records when a GPU stage is only the probe's word (verify/claims.py)
UNBACKED_CLASSES = frozenset({"gpu-claim-unbacked", "server-unobserved"})


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


def signer_of(record: CellResult, trusted: Sequence[PublicKey]) -> PublicKey | str:
    """The trusted key that sealed this very record, else why none did (one line, without the cell id)."""
    try:
        return seal.signer(record, trusted)
    except dsse.EnvelopeError as exc:
        return exc.message.removeprefix(f"{record.cell_id}: ")


def axes_problem(record: CellResult, cell: Cell, matrix: Matrix) -> str | None:
    """Why `record` (whose id names `cell`) is not of that cell: its axes differ; None when they are the cell's."""
    if record.axes == cell.axes():
        return None
    differ = sorted(k for k in set(record.axes) | set(cell.axes()) if record.axes.get(k) != cell.axes().get(k))
    return (f"the record's axes are not those of the cell in {matrix.path.name} (they differ in "
            f"{', '.join(differ)}): it is a record of another cell or another matrix")


def foreign(record: CellResult, cell: Cell) -> str | None:
    """Why the image `record` judged is not a build of `cell` (its labels name no such cell, other axes, no
    build inputs or another platform), None when it is one. A record with no image (excluded, not built) judged
    no image at all."""
    if record.build is None or record.build.status is not Status.PASSED:
        return None
    labels = record.image.labels
    named = labels.get(f"{LABEL_PREFIX}.cell")
    if named != cell.id:
        return (f"the image it judged ({record.image.ref or record.image.id or 'unnamed'}) is not a build of this "
                f"cell: {f'its labels name cell {named!r}' if named else 'it carries no cell label'}")
    differ = sorted(k for k, v in cell.axes().items() if labels.get(f"{LABEL_PREFIX}.{k}") != v)
    platform = labels.get(f"{LABEL_PREFIX}.platform", DEFAULT_PLATFORM)
    if platform != cell.platform:
        differ.append(f"platform {platform}")
    if not labels.get(f"{LABEL_PREFIX}.inputs"):
        differ.append("no build inputs")
    if differ:
        return f"the image it judged is not this cell's build: its labels differ in {', '.join(differ)}"
    return None


def judged_with(record: CellResult, cell: Cell | None) -> CellResult:
    """The record judged again today: with the matrix cell's axes, targets and expectation when it is one, and
    a passed GPU stage without a recorded GPU name and arch counted as skipped."""
    update: dict[str, object] = {"stages": [gpu_checked(s) for s in record.stages]}
    if cell is not None:
        update |= {"axes": cell.axes(), "targets": list(cell.archs), "excluded": cell.excluded,
                   "expected": cell.expected_failure()}
    return results.judged(record.model_copy(update=update))


def check(record: CellResult, position: int, matrix: Matrix, trusted: Sequence[PublicKey], *,
          file_digest: str | None = None) -> Trusted | Refused:
    """The gate for one record: Trusted with its judgement, or Refused with the reason (`file_digest`: the matrix
    digest its file names, for a record that sealed none)."""
    def refused(reason: str) -> Refused:
        return Refused(position, record.cell_id, reason)

    signer = signer_of(record, trusted)
    if isinstance(signer, str):
        return refused(signer)
    carried = cpu_record.recheck(record, trusted)   # a carried CPU stage counts under its own record's key too
    if carried:
        return refused(f"its carried CPU stages do not stand: {carried}")
    cell = matrix.cell(record.cell_id)
    if cell is None:
        return refused(f"{record.cell_id!r} is no cell of {matrix.path}: its tags cannot be named")
    # the definition first: it says best what changed (the axes hold the targets too)
    why_not = definitions.stale(record, cell, matrix.digest, file_digest)
    if why_not:
        return refused(f"stale: {why_not}")
    why_not = axes_problem(record, cell, matrix)
    if why_not:
        return refused(why_not)
    why_foreign = foreign(record, cell)
    if why_foreign:
        return refused(f"foreign: {why_foreign}")
    judged = judged_with(record, cell)
    image_id = record.image.id or ""
    if judged.verified_archs and not IMAGE_ID.fullmatch(image_id):  # what earns nothing needs no image
        what = f"{image_id!r} is" if image_id else "no image id is recorded, which is"
        return refused(f"{what} not a full image id (sha256: and 64 hex digits): nothing identifies "
                       "the image that was tested (a host or LXC run has no image to tag)")
    return Trusted(position, record, cell, judged, signer)


def gpu_checked(stage: StageResult) -> StageResult:
    """A passed GPU stage without the GPU's name and arch counts as skipped: nothing says a GPU ran it."""
    if stage.name not in GPU_STAGES or stage.status is not Status.PASSED or (stage.gpu and stage.arch):
        return stage
    return stage.model_copy(update={"status": Status.SKIPPED, "reason": NO_GPU_RECORDED, "arch": None})


class Mark(StrEnum):
    """Why a record is not shown as the gate's word, in the order they are looked for."""

    UNSEALED = "unsealed"            # no seal: written by hand, by import-probe, or before records were sealed
    UNTRUSTED = "untrusted-seal"     # a seal no trusted key made, or the record changed since it was sealed
    STALE = "stale"                  # its cell's definition changed since (or the axes of another cell)
    FOREIGN = "foreign"              # the image it judged is not a build of its cell
    SELF_REPORTED = "self-reported"  # GPU stages the probe reported itself: no host saw a GPU or the server
    OLDER_RULES = "older-rules"      # the verdict it records is not what today's rules make of it


@dataclass(frozen=True)
class Weight:
    """What one record is worth to a reader: its judgement today, and every mark it earned with the reason."""

    judged: CellResult
    marks: tuple[tuple[Mark, str], ...]

    @property
    def vouches(self) -> bool:
        """The gate's word: sealed by a trusted key, unchanged, its cell's definition unchanged, of its cell's image,
        host-judged, judged today."""
        return not self.marks


NO_MATRIX = "no matrix.yaml was there to judge it against"


def weigh(record: CellResult, matrix: Matrix | None, trusted: Sequence[PublicKey], *,
          file_digest: str | None = None) -> Weight:
    """The record as `check` would weigh it, every failed step a mark (`file_digest`: the matrix digest of the file
    it came from, for a record that sealed none). A run that is no cell of matrix.yaml (host mode, in place in LXC)
    is judged with what it recorded: no cell's definition can make it stale."""
    marks: list[tuple[Mark, str]] = []
    if record.seal is None:
        marks.append((Mark.UNSEALED, "no verifier sealed this record (written by hand, by import-probe, or "
                                     "before records were sealed)"))
    elif isinstance(why := signer_of(record, trusted), str):
        marks.append((Mark.UNTRUSTED, why))
    elif carried := cpu_record.recheck(record, trusted):
        marks.append((Mark.UNTRUSTED, f"its carried CPU stages do not stand: {carried}"))
    cell = matrix.cell(record.cell_id) if matrix is not None else None
    if matrix is None:
        marks.append((Mark.STALE, NO_MATRIX))
    elif cell is None:
        if record.axes.get("cell") == record.cell_id:   # a cell's record, of no cell of today's matrix
            marks.append((Mark.STALE, f"{record.cell_id} is no cell of {matrix.path.name} today"))
    else:
        why_stale = definitions.stale(record, cell, matrix.digest, file_digest)
        other_axes = axes_problem(record, cell, matrix)
        if why_stale or other_axes:
            marks.append((Mark.STALE, why_stale or str(other_axes)))
        if other_axes:
            cell = None   # the axes of another cell: judged with what it recorded
    if cell is not None and (why_foreign := foreign(record, cell)):
        marks.append((Mark.FOREIGN, why_foreign))
    judged = judged_with(record, cell)
    unbacked = [s.name for s in record.stages if s.name in GPU_STAGES and (
        s.failure_class in UNBACKED_CLASSES or gpu_checked(s) is not s)]
    if unbacked:
        marks.append((Mark.SELF_REPORTED, f"{', '.join(unbacked)}: the probe's own report, no host saw the GPU "
                                          "or the server"))
    if record.verdict is not judged.verdict:
        marks.append((Mark.OLDER_RULES, f"it records {record.verdict.value}; today's rules: {judged.verdict.value}"))
    return Weight(judged, tuple(marks))
