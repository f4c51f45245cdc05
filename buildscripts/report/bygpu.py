"""The view by GPU: "I have a B200: which tag do I pull, and what was verified on my arch?"

For each platform the images are built for (linux/amd64, linux/arm64) and each GPU arch family its images target
or are audited for (products from data/gpus.yaml: an H200 is an amd64 machine, a GH200 an arm64 one, both sm_90):
the images of that platform verified there (only records the gate lets through: report/weigh.py), by
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

from ..matrix.tagtemplates import named
from ..results import CPU_STAGES, GPU_STAGES, CellResult, Status, family, tag_form, verified_archs
from ..results.archs import families
from . import common, grid
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
class Answer:
    """The row's answer: the image to pull for that GPU and platform, and how far it was verified there."""

    cell_id: str | None     # None: no image of this platform targets the arch, or none has a record that counts
    tag: str                # repository:tag as the templates name it (registry first when one is configured)
    state: str              # a key of common.ANSWER_MARKS
    check: str | None       # the command that checks its signed verdict (verified by digest only)

    @property
    def label(self) -> str:
        return f"{common.ANSWER_MARKS[self.state]} {common.ANSWER_WORDS[self.state]}"


NO_ANSWER = Answer(None, "—", "nothing", None)
RANK = {"verified": 0, "cpu-only": 1, "failed": 2}


@dataclass(frozen=True)
class GpuRow:
    platform: str                              # linux/arm64: the images of this row are of that platform
    arch: str                                  # family: sm_100
    products: tuple[str, ...]                  # of that platform (a GB200 on linux/arm64, a B200 on linux/amd64)
    verified: list[Verified] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)     # cell ids: compiled and audited for it, not run there
    ran: list[str] = field(default_factory=list)          # cell ids whose GPU stages ran there, not verified
    claimed: list[str] = field(default_factory=list)      # records nobody vouches for that say they passed there
    answer: Answer = NO_ANSWER

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
def catalogue() -> dict[str, dict[str, tuple[str, ...]]]:
    """Platform -> arch family -> example products, in the file's order."""
    data: dict[str, Any] = yaml.safe_load(CATALOGUE.read_text(encoding="utf-8"))
    return {str(platform): {family(k): tuple(v) for k, v in archs.items()}
            for platform, archs in data["platforms"].items()}


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


def views(weighed: Weighed) -> list[tuple[str, list[GpuRow]]]:
    """Per platform (the catalogue's, then any other a cell is of), one row per arch of the catalogue and of its
    cells' targets, in arch order; the cells are the images of that platform's grid (host-mode and in-place runs are
    no image to pull)."""
    known = catalogue()
    by_platform: dict[str, list[CellResult]] = {platform: [] for platform in known}
    for cell in weighed.run.cells:
        by_platform.setdefault(weighed.platform_of(cell), []).append(cell)
    return [(platform, _rows(platform, known.get(platform, {}), weighed, cells))
            for platform, cells in by_platform.items()]


def rows(weighed: Weighed) -> list[GpuRow]:
    """Every platform's rows, platform by platform."""
    return [row for _, found in views(weighed) for row in found]


def _rows(platform: str, known: dict[str, tuple[str, ...]], weighed: Weighed,
          of_platform: list[CellResult]) -> list[GpuRow]:
    view = grid.layout(weighed.run.model_copy(update={"cells": of_platform}))
    cells = [view.slots[slot] for slot in sorted(view.slots) if not view.slots[slot].excluded]
    archs = sorted(set(known) | {family(t) for c in cells for t in c.targets}, key=lambda a: (len(a), a))
    found = []
    for arch in archs:
        row = GpuRow(platform, arch, known.get(arch, ()), answer=answer(arch, cells, weighed))
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


def answer(arch: str, cells: list[CellResult], weighed: Weighed) -> Answer:
    """The image to pull for `arch`: of the cells that target it and are meant to run (no declared failure), the
    one whose record counts for the most (verified there, then CPU stages only, then failed), newest SGLang first."""
    ranked = []
    for cell in cells:
        if cell.expected is not None or arch not in families(cell.targets):
            continue
        found = common.state(cell, weighed)
        if found == "verified" and arch not in verified_archs(cell):
            found = "cpu-only" if _compiled_for(cell, arch) else "nothing"
        elif found == "cpu-only" and not _compiled_for(cell, arch):
            found = "nothing"
        if found in RANK:
            ranked.append((RANK[found], cell, found))
    if not ranked:
        return NO_ANSWER
    best = min(rank for rank, _, _ in ranked)
    _, cell, found = max((r for r in ranked if r[0] == best),
                         key=lambda r: grid.version_key(r[1].axes.get("sglang", "")))
    verified = _verified(cell, arch) if found == "verified" else None
    return Answer(cell.cell_id, _tag(cell, arch if found == "verified" else None, weighed), found,
                  verified.check if verified else None)


def _tag(cell: CellResult, arch: str | None, weighed: Weighed) -> str:
    """The good tag the templates name for `cell` (for `arch` when verified there), the registry first."""
    if weighed.tags is None:
        return cell.image.ref or cell.cell_id
    tags = named(weighed.tags, cell.axes, [tag_form(arch)] if arch else [], every_arch=arch is None)
    tag = tags[0] if tags else f"{weighed.tags.repository}:{cell.cell_id}"
    return f"{weighed.registry.rstrip('/')}/{tag}" if weighed.registry else tag
