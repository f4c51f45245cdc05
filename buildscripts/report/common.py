"""What every renderer shares: stage columns, status marks, and where GPU stages ran.

Renderers only present what the results say: verdicts come from `results.judge` (re-judged here,
so a hand-edited verdict can never show as "verified"), what a record is worth from the gate (report/weigh.py:
a record the gate would not let through is never shown as verified), stage outcomes from the stage records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..probe.core import ORDER
from ..results import GPU_STAGES, CellResult, RunResults, StageResult, Status, Verdict, judge, verified_archs
from ..results.judge import failure_detail
from ..results.notes import warnings
from .weigh import ICONS, WORDS, Marks, Weighed

BUILD = "build"
MARKS = {"passed": "✓", "failed": "✕", "skipped": "–", "aborted": "·"}
RANK = {Status.PASSED: 0, Status.SKIPPED: 1, Status.ABORTED: 2, Status.FAILED: 3}  # worst shows
LEGEND = ("✓ passed · ✕ failed · – skipped (could not run here) · · aborted (a prerequisite failed) · "
          "blank: not run")
VERDICT_ICONS = {
    Verdict.VERIFIED: "✅", Verdict.CPU_CHECKED: "☑️", Verdict.BUILT: "📦", Verdict.FAILED: "❌",
    Verdict.EXPECTED_FAILURE: "⚠️", Verdict.UNEXPECTED_PASS: "❗", Verdict.INCOMPATIBLE: "🚫",
    Verdict.SKIPPED: "⏭️",
}


# Terminal colour and cursor sequences (real build and ninja logs are full of them): CSI, OSC, and two-byte ones.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
# What XML 1.0 cannot hold (a JUnit file with one is dropped by CI test reporters) and no page should show:
# control characters but tab and line breaks, surrogates, U+FFFE/U+FFFF.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def plain(text: str) -> str:
    """Text for a report: terminal escape sequences removed, any other control character shown as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else "\ufffd", _ANSI.sub("", text))


def stage_columns(run: RunResults) -> list[str]:
    """`build`, then the probe's stages in ladder order, then any other stage names seen."""
    seen = [s.name for c in run.cells for s in c.stages]
    known = [name for name in ORDER if name in seen]
    extra = list(dict.fromkeys(n for n in seen if n not in ORDER))
    return [BUILD, *known, *extra]


CLAIMED = "claimed"      # what a record nobody vouches for is shown as where it would be verified
CLAIMED_ICON = "❔"


@dataclass(frozen=True)
class Shown:
    """What every report says of one cell: today's verdict and reason, and the marks that keep it from being the
    gate's word. A marked record that would be verified is `claimed`: never ✅, never a GPU named as verified."""

    verdict: Verdict
    reason: str
    marks: Marks

    @property
    def claimed(self) -> bool:
        return bool(self.marks) and self.verdict is Verdict.VERIFIED

    @property
    def word(self) -> str:
        return CLAIMED if self.claimed else self.verdict.value

    @property
    def mark_icons(self) -> str:
        return "".join(ICONS[m] for m in dict.fromkeys(m for m, _ in self.marks))

    @property
    def label(self) -> str:
        """'✅ verified', '❌ failed 🔓', '❔ claimed 🔓🕰️'."""
        icon = CLAIMED_ICON if self.claimed else VERDICT_ICONS.get(self.verdict, "")
        return " ".join(p for p in (icon, self.word, self.mark_icons) if p)

    @property
    def said(self) -> str:
        """The verdict's reason; for a claim, what the record says without calling it verified."""
        return "by its own record, GPU stages passed: " + self.reason.removeprefix("verified on ") \
            if self.claimed else self.reason

    @property
    def short(self) -> str:
        """The reason, and the marks' words: '… (unsealed, another matrix)'."""
        words = ", ".join(dict.fromkeys(WORDS[m] for m, _ in self.marks))
        return f"{self.said} ({words})" if words else self.said

    @property
    def why(self) -> str:
        """The reason, and for a marked record what each mark means for it."""
        return "; ".join([self.said, *(f"{WORDS[m]}: {why}" for m, why in self.marks)])


def shown(cell: CellResult, weighed: Weighed) -> Shown:
    """A cell as every report shows it. An excluded cell carries no marks: its verdict follows from matrix.yaml,
    whatever record says it. Records left aside for ones the gate lets through are named in the reason."""
    verdict, reason = verdict_of(cell)
    if weighed.unused.get(cell.cell_id):
        reason += "; records left aside (the gate would not let them through): " + \
            "; ".join(weighed.unused[cell.cell_id])
    return Shown(verdict, reason, () if verdict is Verdict.INCOMPATIBLE else weighed.of(cell))


def verdict_of(cell: CellResult) -> tuple[Verdict, str]:
    """The verdict as `judge` makes it now (a stored verdict that disagrees is not shown), and its reason;
    a verification reused from an earlier run says which (every report's reason comes from here)."""
    verdict, reason = judge(cell)
    if cell.reused_from:
        reason += f" (verification reused: {cell.reused_from})"
    for stage, text in warnings(cell):
        reason += f"; warning from {stage}: {text}"
    return verdict, reason


def entries(cell: CellResult, name: str) -> list[StageResult]:
    """Every result of one stage: one, or one per GPU arch in a merged record."""
    return [s for s in cell.stages if s.name == name]


def outcome(cell: CellResult, column: str) -> tuple[str, str]:
    """(status word, reason) of one cell × column; ("", "") when it never ran.

    A stage that ran on several GPU archs shows its worst status, and the reason names each arch.
    """
    if column == BUILD:
        if cell.build is None:
            return ("skipped", cell.excluded) if cell.excluded else ("", "")
        reason = cell.build.reason or ("cached" if cell.build.cached else "")
        return cell.build.status.value, reason
    found = entries(cell, column)
    if not found:
        return "", ""
    worst = max(found, key=lambda s: RANK[s.status])
    if len(found) == 1:
        return worst.status.value, _reason(worst)
    per_arch = [f"{s.arch or 'no GPU'}: {s.status.value}" + (f" ({_reason(s)})" if _reason(s) else "") for s in found]
    return worst.status.value, "; ".join(per_arch)


def _reason(stage: StageResult) -> str:
    if stage.status is Status.FAILED:
        detail = failure_detail(stage)  # an unclassified failure shows its decisive log line
        extra = [stage.reason] if stage.reason and stage.reason not in detail else []
        return "; ".join([detail, *extra])
    return stage.reason or ""


def mark(status: str) -> str:
    return MARKS.get(status, "")


def gpu_summary(cell: CellResult, *, vouched: bool) -> str:
    """Where the GPU stages ran: 'NVIDIA H200 (sm_90), in a container: all GPU stages' or 'not run on a GPU';
    for a record nobody vouches for, 'by its own record: …'."""
    places: dict[str, list[str]] = {}
    for stage in cell.stages:
        if stage.name in GPU_STAGES and stage.gpu and stage.status in (Status.PASSED, Status.FAILED):
            where = f"{stage.gpu} ({stage.arch or 'arch unknown'}){placement(stage.where)}"
            places.setdefault(where, []).append(stage.name)
    if not places:
        return "not run on a GPU"
    return ("" if vouched else "by its own record: ") + "; ".join(
        f"{where}: {'all GPU stages' if len(names) == len(GPU_STAGES) else ', '.join(names)}"
        for where, names in places.items()
    )


def placement(where: str) -> str:
    """`, in a container`, `, host mode` or `, in an LXC container`, from a stage's `where`."""
    mode = where.split(":", 1)[0].split(" ", 1)[0]
    return {"container": ", in a container", "host": ", host mode", "lxc": ", in an LXC container"}.get(mode, "")


def gpu_stage_places(cell: CellResult) -> list[tuple[str, str]]:
    """(stage, where it ran) for every GPU stage of the ladder, 'not run on a GPU' when it did not."""
    rows = []
    for name in GPU_STAGES:
        found = entries(cell, name)
        if not found:
            rows.append((name, "not run on a GPU (no result)"))
        for stage in found:
            if stage.gpu and stage.status in (Status.PASSED, Status.FAILED):
                ran = f"{stage.where}: {stage.gpu} ({stage.arch or 'arch unknown'})"
                rows.append((name, ran if len(found) == 1 else f"{stage.status.value}, {ran}"))
            else:
                why = f"{stage.status.value}: {stage.reason or 'no reason given'}"
                rows.append((name, f"not run on a GPU ({why})"))
    return rows


def sort_cells(cells: Iterable[CellResult]) -> list[CellResult]:
    return sorted(cells, key=lambda c: c.cell_id)


# The answer's few marks (README, the answer by GPU, the grids): what the gate vouches for, in one word each.
ANSWER_MARKS = {"verified": "✅", "cpu-only": "☑️", "failed": "❌", "as-declared": "⚠️", "nothing": "—"}
ANSWER_WORDS = {"verified": "verified", "cpu-only": "CPU stages only", "failed": "failed",
                "as-declared": "fails as declared", "nothing": "nothing yet"}
ANSWER_LEGEND = ("✅ = verified on a GPU of that arch (by digest, a signed verdict) · ☑️ = CPU stages only: built, "
                 "imports, JIT compiles and the arch audit passed, no GPU ran it · ❌ = failed · ⚠️ = fails as "
                 "matrix.yaml declares (it documents an incident) · — = nothing yet that counts")
# The same in words, for the HTML page (it draws no emoji: report/html_marks.py)
ANSWER_LEGEND_WORDS = ("verified: on a GPU of that arch (by digest, a signed verdict) · CPU stages only: built, "
                       "imports, JIT compiles and the arch audit passed, no GPU ran it · failed · fails as declared: "
                       "as matrix.yaml declares (it documents an incident) · — nothing yet that counts")
_STATE = {Verdict.VERIFIED: "verified", Verdict.CPU_CHECKED: "cpu-only", Verdict.FAILED: "failed",
          Verdict.UNEXPECTED_PASS: "failed", Verdict.EXPECTED_FAILURE: "as-declared"}


def state(cell: CellResult, weighed: Weighed) -> str:
    """The answer's state of a cell: only a record the gate lets through counts (else `nothing`)."""
    if not weighed.vouched(cell):
        return "nothing"
    return _STATE.get(verdict_of(cell)[0], "nothing")


def state_label(cell: CellResult, weighed: Weighed) -> str:
    """'✅ verified sm_90', '☑️ CPU stages only', '— nothing yet'."""
    found = state(cell, weighed)
    archs = " ".join(a for a in verified_archs(cell)) if found == "verified" else ""
    return " ".join(p for p in (ANSWER_MARKS[found], ANSWER_WORDS[found], archs) if p)
