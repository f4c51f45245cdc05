"""The view by GPU: "I have a B200: which tag do I pull, and what was verified on my arch?"

For each GPU arch family the images target or are audited for (products from data/gpus.yaml), on the platform
the images are built for: the images verified there (only records the gate lets through: report/weigh.py), by
digest with the signed verdict's check command; the cells only compiled and audited for it (their CPU stages,
JIT compiles and arch audit included, passed; nothing ran on such a GPU); and, plainly, where nothing ran yet.
Renderers (markdown, html, console, junit) only lay these rows out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..results import CPU_STAGES, GPU_STAGES, CellResult, Status, family, verified_archs
from ..results.archs import families
from . import grid
from .weigh import Weighed

CATALOGUE = Path(__file__).resolve().parent.parent / "data" / "gpus.yaml"
HEADINGS = ("GPU arch", "for example", "verified there: pull, and check the signed verdict", "ran there, not verified",
            "only compiled and audited for it")
ABOUT = ("what to pull for your GPU, what was verified on its arch (by digest, with the command that checks the "
         "signed verdict), and what was only compiled and audited for it")


@dataclass(frozen=True)
class Verified:
    cell_id: str
    pull: str            # REPO@sha256:… (or the tested image's reference when it was never pushed)
    check: str | None    # the command that checks the signed verdict, when the image has a registry digest
    tags: tuple[str, ...]


@dataclass(frozen=True)
class GpuRow:
    arch: str                                  # family: sm_100
    products: tuple[str, ...]
    elsewhere: tuple[str, ...]                 # products on another platform: no image for them
    verified: list[Verified] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)     # cell ids: compiled and audited for it, not run there
    ran: list[str] = field(default_factory=list)          # cell ids whose GPU stages ran there, not verified
    claimed: list[str] = field(default_factory=list)      # records nobody vouches for that say they passed there

    @property
    def nothing_ran(self) -> bool:
        return not (self.verified or self.ran or self.claimed)

    def summary(self) -> str:
        """One plain sentence of what holds for this arch."""
        if self.verified:
            said = f"verified: {', '.join(v.cell_id for v in self.verified)}"
        elif self.ran or self.claimed:
            said = "ran here, nothing verified (" + ", ".join(
                [*(f"{c}: not passed" for c in self.ran), *(f"{c}: claimed, not vouched for" for c in self.claimed)]
            ) + ")"
        else:
            said = "nothing has run on this GPU yet"
        compiled = f"; compiled and audited for it: {len(self.compiled)} cell(s)" if self.compiled else ""
        return said + compiled


@functools.cache
def catalogue() -> tuple[str, dict[str, dict[str, list[str]]]]:
    data: dict[str, Any] = yaml.safe_load(CATALOGUE.read_text(encoding="utf-8"))
    return str(data["platform"]), {family(k): v for k, v in data["archs"].items()}


def platform() -> str:
    return catalogue()[0]


def _compiled_for(cell: CellResult, arch: str) -> bool:
    """The CPU stages passed, JIT compiles and the arch audit for `arch` included."""
    passed = {s.name for s in cell.stages if s.status is Status.PASSED and s.name in CPU_STAGES}
    return arch in families(cell.targets) and set(CPU_STAGES) <= passed


def _ran_on(cell: CellResult, arch: str) -> bool:
    return any(s.name in GPU_STAGES and s.arch and family(s.arch) == arch and s.status is not Status.SKIPPED
               for s in cell.stages)


def _verified(cell: CellResult, arch: str) -> Verified:
    target = next((t for t in cell.targets if family(t) == arch), arch)
    refs = [f"{repo.split('@')[0]}@{digest}" for repo, digest in cell.promoted.items()]
    if not refs and cell.image.repository and cell.image.digest:
        refs = [f"{cell.image.repository}@{cell.image.digest}"]
    pull = refs[0] if refs else (cell.image.ref or cell.image.id or "no image recorded")
    check = f"nox -s check -- {refs[0]} --arch {target}" if refs else None
    return Verified(cell.cell_id, pull, check, tuple(cell.tags))


def rows(weighed: Weighed) -> list[GpuRow]:
    """One row per arch of the catalogue and of the cells' targets, in arch order; the cells are the images of
    the grid (host-mode and in-place runs are no image to pull)."""
    _, known = catalogue()
    view = grid.layout(weighed.run)
    cells = [view.slots[slot] for slot in sorted(view.slots) if not view.slots[slot].excluded]
    archs = sorted(set(known) | {family(t) for c in cells for t in c.targets},
                   key=lambda a: (len(a), a))
    found = []
    for arch in archs:
        entry = known.get(arch, {})
        row = GpuRow(arch, tuple(entry.get("products", [])), tuple(entry.get("elsewhere", [])))
        for cell in cells:
            passed_here = arch in verified_archs(cell)
            if passed_here and weighed.vouched(cell):
                row.verified.append(_verified(cell, arch))
            elif passed_here:
                row.claimed.append(cell.cell_id)
            elif _ran_on(cell, arch):
                row.ran.append(cell.cell_id)
            elif _compiled_for(cell, arch):
                row.compiled.append(cell.cell_id)
        found.append(row)
    return found
