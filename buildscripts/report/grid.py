"""The compatibility-matrix view: the reachable grid, SGLang version and its torch lane down, CUDA toolkit across.

The layout only (which cell lands in which slot, what a slot says); `html` and `markdown` draw it.
A slot holds a cell of the matrix on the main base (the base most matrix cells have). A cell excluded because
its SGLang pins another torch than its lane's cannot exist: it takes no slot, and the pins are said once
(`pins`). Everything else — host-mode runs, runs in place in LXC (`CELL@lxc-NAME`), cells of another base —
is listed under "other runs" with the same verdict and archs, so no result is dropped from the view.
`platform_grids` makes one grid per platform of today's matrix cells, reachable cells only, the combinations
not built counted once per reason; `others` is every record no grid holds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ..results import GPU_STAGES, CellResult, RunResults, arch_outcomes, family, verified_archs
from ..results.judge import ARCH_FAILED, ARCH_VERIFIED
from . import common
from .weigh import Weighed

AXES = ("sglang", "lane", "toolkit")
ARCH_MARKS = {ARCH_VERIFIED: "✓", ARCH_FAILED: "✕"}  # others (incomplete, not a target): "·"
CLAIMED_ARCH = "?"   # an arch a record nobody vouches for says its GPU stages passed on

Slot = tuple[str, str, str]  # (sglang version, lane, toolkit)
# "sglang 0.5.10 pins torch 2.9.1; lane … has torch 2.11.0" (matrix/cells.py): an exclusion by an exact pin
PIN = re.compile(r"^sglang (?P<sglang>\S+) pins torch (?P<torch>\S+); lane \S+ has torch \S+$")


@dataclass(frozen=True)
class Grid:
    base: str
    versions: list[str]                       # rows, oldest first
    lanes: list[str]                          # column groups
    toolkits: list[str]                       # columns inside every group, the same for each
    slots: dict[Slot, CellResult] = field(default_factory=dict)
    others: list[CellResult] = field(default_factory=list)
    pinned: list[CellResult] = field(default_factory=list)   # excluded by an exact pin: no slot
    rows: list[tuple[str, str]] = field(default_factory=list)  # (version, lane) that hold a slot, in order

    def at(self, version: str, lane: str, toolkit: str) -> CellResult | None:
        return self.slots.get((version, lane, toolkit))

    def pins(self) -> dict[str, str]:
        """SGLang version -> the torch it pins, from the cells excluded by a pin."""
        found = (PIN.match(c.excluded or "") for c in self.pinned)
        return dict(sorted({m["sglang"]: m["torch"] for m in found if m}.items(), key=lambda i: version_key(i[0])))


def version_key(text: str) -> tuple[int, Version | str]:
    try:
        return (0, Version(text))
    except InvalidVersion:
        return (1, text)


def _lane_key(lane: str, cells: Iterable[CellResult]) -> tuple[tuple[int, Version | str], str]:
    """A lane orders by its torch version (2.9.1 before 2.11.0), then by name."""
    torch = next((c.axes.get("torch", "") for c in cells if c.axes.get("lane") == lane), "")
    return (version_key(torch), lane)


def _in_matrix(cell: CellResult) -> bool:
    """A cell of matrix.yaml itself: all coordinates, and its id is the matrix's id (not a run elsewhere)."""
    return all(cell.axes.get(a) for a in AXES) and cell.axes.get("cell") == cell.cell_id


def layout(run: RunResults) -> Grid:
    cells = common.sort_cells(run.cells)
    candidates = [c for c in cells if _in_matrix(c)]
    bases = Counter(c.axes.get("base", "") for c in candidates)
    base = min(bases, key=lambda b: (-bases[b], b)) if bases else ""
    slots: dict[Slot, CellResult] = {}
    others: list[CellResult] = []
    pinned: list[CellResult] = []
    for cell in cells:
        slot = (cell.axes.get("sglang", ""), cell.axes.get("lane", ""), cell.axes.get("toolkit", ""))
        # `_in_matrix` again rather than `cell in candidates`: a list search per cell was quadratic in cells
        if _in_matrix(cell) and cell.axes.get("base", "") == base and slot not in slots:
            if PIN.match(cell.excluded or ""):
                pinned.append(cell)
            else:
                slots[slot] = cell
        else:
            others.append(cell)
    placed = list(slots.values())
    return Grid(
        base=base,
        versions=sorted({s[0] for s in slots}, key=version_key),
        lanes=sorted({s[1] for s in slots}, key=lambda lane: _lane_key(lane, placed)),
        toolkits=sorted({s[2] for s in slots}, key=lambda t: (t != "none", t)),  # "none" (pip only) first
        slots=slots, others=others, pinned=pinned,
        rows=sorted({s[:2] for s in slots}, key=lambda r: (version_key(r[0]), _lane_key(r[1], placed))),
    )


def pins_line(view: Grid) -> str | None:
    """The exact pins, said once: why the grid has one torch lane per SGLang version."""
    pins = view.pins()
    if not pins:
        return None
    said = "; ".join(f"SGLang {version} pins torch {torch}" for version, torch in pins.items())
    return (f"Each SGLang release pins one torch ({said}): the {len(view.pinned)} cell(s) that pair a release "
            "with another torch lane cannot exist and are not shown.")


def arch_line(cell: CellResult, *, vouched: bool) -> str:
    """The archs the GPU stages ran on: 'sm_100 · sm_120' when all verified, else each with ✓/✕/·; a record
    nobody vouches for never shows an arch as verified ('?sm_90': its own record says passed)."""
    outcomes = arch_outcomes(cell)
    if not outcomes:
        return ""
    marks = ARCH_MARKS if vouched else {**ARCH_MARKS, ARCH_VERIFIED: CLAIMED_ARCH}
    if vouched and all(o == ARCH_VERIFIED for o in outcomes.values()) and verified_archs(cell):  # judged now
        return " · ".join(outcomes)
    return " ".join(f"{marks.get(o, '·')}{arch}" for arch, o in outcomes.items())


def arch_provenance(cell: CellResult, *, vouched: bool) -> list[str]:
    """One line per arch: its outcome, the GPU, and the run, runner and time its GPU stages came from."""
    lines = []
    for arch, outcome in arch_outcomes(cell).items():
        outcome = outcome if vouched or outcome != ARCH_VERIFIED else "passed by its own record"
        stages = [s for s in cell.stages if s.arch and s.name in GPU_STAGES and family(s.arch) == arch]
        source = stages[-1] if stages else None
        where = " · ".join(p for p in (source.gpu, source.run_id, source.runner, source.finished) if p) \
            if source else ""
        lines.append(f"{arch}: {outcome}" + (f" ({where})" if where else ""))
    return lines


def place(cell: CellResult) -> str:
    """Where an 'other run' ran: host mode, an LXC container, or a container on another base."""
    if cell.image.id and cell.image.id.startswith("lxc:"):
        return "in place in an LXC container"
    host_build = bool(cell.build and cell.build.reason and cell.build.reason.startswith("host mode"))
    if (cell.image.id or "").startswith("host:") or cell.axes.get("base") == "host" or host_build:
        return "host mode"
    base = cell.axes.get("base")
    return f"in a container, base {base}" if base else "in a container"


@dataclass(frozen=True)
class PlatformGrid:
    """One platform's grid: its reachable cells only (rows and toolkits with no buildable cell left out), and the
    combinations not built, counted once per reason (every exact pin counted as one reason)."""

    platform: str
    grid: Grid
    excluded: list[tuple[str, int]]


PINNED = "pair a SGLang release with a torch it does not pin"


def platform_grids(weighed: Weighed) -> list[PlatformGrid]:
    """A grid per platform (the catalogue's order, then any other), of today's matrix cells of that platform."""
    by_platform: dict[str, list[CellResult]] = {}
    for cell in weighed.run.cells:
        if _is_cell(cell, weighed):
            by_platform.setdefault(weighed.platform_of(cell), []).append(cell)
    order = {p: i for i, p in enumerate(("linux/amd64", "linux/arm64"))}
    found = []
    for platform in sorted(by_platform, key=lambda p: (order.get(p, len(order)), p)):
        view = layout(weighed.run.model_copy(update={"cells": by_platform[platform]}))
        reasons = Counter([PINNED] * len(view.pinned) + [c.excluded for c in view.slots.values() if c.excluded])
        reachable = {slot: c for slot, c in view.slots.items() if not c.excluded}
        if not reachable:
            continue
        rows = [r for r in view.rows if any(s[:2] == r for s in reachable)]
        kept = Grid(base=view.base, versions=[v for v in view.versions if any(r[0] == v for r in rows)],
                    lanes=[lane for lane in view.lanes if any(r[1] == lane for r in rows)],
                    toolkits=[t for t in view.toolkits if any(s[2] == t for s in reachable)],
                    slots=reachable, pinned=view.pinned, rows=rows)
        found.append(PlatformGrid(platform, kept, [(str(why), n) for why, n in reasons.most_common()]))
    return found


def others(weighed: Weighed) -> list[CellResult]:
    """What no grid holds: host-mode runs, runs in place in LXC, another image verified under a cell's name, cells
    of another base or of no cell of today's matrix."""
    in_grids = {c.cell_id for g in platform_grids(weighed) for c in [*g.grid.slots.values(), *g.grid.pinned]}
    return [c for c in common.sort_cells(weighed.run.cells) if c.cell_id not in in_grids and not c.excluded]


def _is_cell(cell: CellResult, weighed: Weighed) -> bool:
    """A record of a cell of today's matrix (of any cell that looks like one when no matrix was read)."""
    known = weighed.matrix_cells
    return _in_matrix(cell) if known is None else cell.cell_id in known and _in_matrix(cell)
