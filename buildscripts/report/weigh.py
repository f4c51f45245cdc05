"""What the reports may say of each record: the gate's word (buildscripts/gate.py), never a second judge.

Every record of every file is weighed as `tag` and `promote` weigh it (sealed by a key the report trusts,
unchanged since, of this matrix, GPU stages the host saw, judged with today's rules). Per cell:
- the records with no mark are merged (newest stage per stage and GPU arch, as report/merge.py does): only
  such a cell may show "verified" (✅, a GPU named); its other records are named as left aside, with their marks;
- a cell with no such record shows its newest record alone, with every mark it earned (stages of records
  nobody vouches for are never stitched together), and a mark "judged by older rules" when an earlier record
  of the same build said verified and today's judgement of the newest does not.

Which keys a report trusts: those the gate trusts (keys/*.pub, the key this process signs with, --trust-key),
and for reports only the public keys committed with the evidence under `evidence/keys/*.pub`
(docs/what-ran-where.md): a GPU test machine's key, committed with the runs it sealed, lets those runs show as
verified in the README, and never counts for `tag`, `promote`, `export` or `check`. The README's table trusts
only what is committed (`committed_keys`: keys/*.pub and evidence/keys/*.pub), so that it renders the same on
every machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..gate import Mark, Weight, weigh
from ..matrix import Matrix
from ..matrix.platforms import DEFAULT as DEFAULT_PLATFORM
from ..matrix.schema import LABEL_PREFIX, Tags
from ..results import CellResult, RunResults, Verdict
from ..trust import keys
from ..trust.keys import PublicKey
from . import merge

EVIDENCE_KEYS = Path("evidence") / "keys"   # under the project root: public keys trusted by reports only

Marks = tuple[tuple[Mark, str], ...]

ICONS = {Mark.UNSEALED: "🔓", Mark.UNTRUSTED: "🔏", Mark.STALE: "🧭", Mark.FOREIGN: "👽", Mark.SELF_REPORTED: "🗣️",
         Mark.OLDER_RULES: "🕰️"}
WORDS = {Mark.UNSEALED: "unsealed", Mark.UNTRUSTED: "seal not trusted", Mark.STALE: "stale",
         Mark.FOREIGN: "not the cell's image", Mark.SELF_REPORTED: "self-reported by the probe",
         Mark.OLDER_RULES: "judged by older rules"}
LEGEND = ("✅ only where a key this report trusts sealed the record and today's rules accept it · "
          "🔓 unsealed (written by hand, by import-probe, or before records were sealed) · "
          "🔏 a seal no trusted key made, or changed since · 🧭 stale: its cell's definition changed since · "
          "👽 not the cell's image (another image judged under its name) · "
          "🗣️ GPU stages the probe reported itself (no host saw them) · "
          "🕰️ judged by older rules (today's judgement differs) · "
          "❔ claimed: a marked record whose GPU stages passed by its own account")
# The same in words, for the HTML page (it draws no emoji: report/html_marks.py)
LEGEND_WORDS = ("verified only where a key this report trusts sealed the record and today's rules accept it; "
                "anything else is shown with what it is: " + "; ".join(f"{WORDS[m]}" for m in Mark)
                + "; a marked record whose GPU stages passed by its own account is shown as “claimed”")


@dataclass(frozen=True)
class Weighed:
    """The merged results to render, and per cell id the marks that keep it from being the gate's word."""

    run: RunResults
    marks: Mapping[str, Marks] = field(default_factory=dict)
    unused: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # per cell: records left aside, and why
    platforms: Mapping[str, str] = field(default_factory=dict)   # base name -> the platform of its images
    # today's matrix.yaml, for the answer by GPU and the grids: its cells' ids (None: no matrix was read), the tag
    # templates that name their images, and the registry they are promoted to
    matrix_cells: frozenset[str] | None = None
    tags: Tags | None = None
    registry: str | None = None

    def platform_of(self, cell: CellResult) -> str:
        """The platform of a cell's image: its base's in matrix.yaml, else the one its image's label names (an
        amd64 image carries none), else linux/amd64."""
        return (self.platforms.get(cell.axes.get("base", ""))
                or cell.image.labels.get(f"{LABEL_PREFIX}.platform") or DEFAULT_PLATFORM)

    def of(self, cell: CellResult) -> Marks:
        """A cell never weighed (not in `marks`) is no one's word either."""
        default: Marks = ((Mark.UNTRUSTED, "not weighed against any key"),)
        return self.marks.get(cell.cell_id, default)

    def vouched(self, cell: CellResult) -> bool:
        return not self.of(cell)


def report_keys(root: Path, env: Mapping[str, str], extra: Sequence[Path] = ()) -> list[PublicKey]:
    """The gate's keys (keys.trusted) and the evidence's own (evidence/keys/*.pub)."""
    return _unique(keys.trusted(root, env, extra) + evidence_keys(root))


def committed_keys(root: Path, extra: Sequence[Path] = ()) -> list[PublicKey]:
    """What the README trusts: the keys committed with the project (keys/*.pub, evidence/keys/*.pub) and `extra`,
    never a key of the machine that renders it."""
    return _unique(keys.project_keys(root) + evidence_keys(root) + [keys.read_public(p) for p in extra])


def evidence_keys(root: Path) -> list[PublicKey]:
    return keys.committed(root, EVIDENCE_KEYS)


def _unique(found: Sequence[PublicKey]) -> list[PublicKey]:
    return list({k.keyid: k for k in found}.values())


FOREIGN_SUFFIX = "@foreign-image"   # a record of another image under a cell's name: its own row, never the cell's


def shown_as(record: CellResult, weight: Weight) -> str:
    """The id a record is shown under: its cell's, unless the image it judged is no build of that cell (a run of
    its own then, among those that are no matrix cell)."""
    foreign = any(mark is Mark.FOREIGN for mark, _ in weight.marks)
    return record.cell_id + FOREIGN_SUFFIX if foreign else record.cell_id


def weigh_runs(runs: Sequence[RunResults], matrix: Matrix | None, trusted: Sequence[PublicKey]) -> Weighed:
    """Every record weighed, then merged as the module docstring says (with no matrix, every record is marked
    stale: nothing says what its cell is)."""
    ordered = sorted(runs, key=merge.when)  # oldest first
    weights: dict[str, list[tuple[RunResults, CellResult, Weight]]] = {}
    for run in ordered:
        for record in run.cells:
            weight = weigh(record, matrix, trusted, file_digest=run.matrix_digest)
            shown = shown_as(record, weight)
            if shown != record.cell_id:   # the judged copy only: the record itself (and its seal) stays as it is
                weight = Weight(weight.judged.model_copy(update={"cell_id": shown}), weight.marks)
            weights.setdefault(shown, []).append((run, record, weight))
    chosen: dict[int, list[CellResult]] = {}
    marks: dict[str, Marks] = {}
    unused: dict[str, tuple[str, ...]] = {}
    for cell_id, found in weights.items():
        vouched = [(run, w.judged) for run, _, w in found if w.vouches]
        if vouched:
            marks[cell_id] = ()
            unused[cell_id] = tuple(f"run {run.run_id} ({', '.join(WORDS[m] for m, _ in dict(w.marks).items())})"
                                    for run, _, w in found if not w.vouches)
        else:
            run, record, weight = found[-1]
            vouched = [(run, weight.judged)]
            marks[cell_id] = weight.marks + _superseded(found)
        for run, judged in vouched:
            chosen.setdefault(id(run), []).append(judged)
    kept = [run.model_copy(update={"cells": chosen[id(run)]}) for run in ordered if id(run) in chosen]
    if matrix is None:
        return Weighed(merge.merge(kept), marks, {k: v for k, v in unused.items() if v})
    platforms = {name: base.cpu.oci for name, base in matrix.spec.bases.items()}
    return Weighed(merge.merge(kept), marks, {k: v for k, v in unused.items() if v}, platforms,
                   frozenset(c.id for c in matrix.cells), matrix.spec.tags, matrix.spec.registry.url)


def _superseded(found: Sequence[tuple[RunResults, CellResult, Weight]]) -> Marks:
    """'judged by older rules' when an earlier record of the newest one's build said verified and today's
    judgement of the newest does not (the same probe output judged again by today's verifier)."""
    _, newest, weight = found[-1]
    if weight.judged.verdict is Verdict.VERIFIED:
        return ()
    said = [(run, record) for run, record, _ in found[:-1]
            if record.verdict is Verdict.VERIFIED and merge.same_build(record, newest)]
    if not said:
        return ()
    run, _ = said[-1]
    return ((Mark.OLDER_RULES, f"run {run.run_id} ({run.finished or run.started}) recorded verified; today's "
                               f"rules: {weight.judged.verdict.value}"),)


def as_judged(run: RunResults, matrix: Matrix, trusted: Sequence[PublicKey]) -> Weighed:
    """One run (a build's own) weighed for its reports."""
    return weigh_runs([run], matrix, trusted)
