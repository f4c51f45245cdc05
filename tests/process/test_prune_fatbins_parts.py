"""The fatbin pruner's parts: it runs from the image's flat folder as the Dockerfiles lay it out, how it packs a
section's fatbins, and which rewrites it refuses to vouch for. The whole pruner on real libraries is in
test_prune_fatbins.py."""

from __future__ import annotations

import importlib
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.process.test_prune_fatbins import FIRST, SECOND, TARGETS, build, load

ROOT = Path(__file__).resolve().parents[2]
LEAN = ROOT / "images" / "lean"
IMAGES_FOLDER = "/opt/images/"
BASE = 0x10000   # the section's address in the packing examples


def copied_into_images_folder(dockerfile: Path) -> list[str]:
    """The sources of every COPY instruction whose destination is /opt/images/ (continued lines joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    sources: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and words[-1] == IMAGES_FOLDER:
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cross"])
def test_the_pruner_runs_from_the_flat_folder_each_dockerfile_copies(tmp_path: Path, dockerfile: str) -> None:
    """In the image the pruner and its siblings lie side by side in /opt/images, with no project around them:
    every module it imports must be among what the Dockerfile copies there."""
    sources = copied_into_images_folder(ROOT / "images" / dockerfile)
    assert "images/lean/prune_fatbins.py" in sources
    folder = tmp_path / "opt" / "images"
    folder.mkdir(parents=True)
    for source in sources:
        shutil.copy(ROOT / source, folder)
    lib = build(tmp_path / "site")
    done = subprocess.run([sys.executable, "-I", str(folder / "prune_fatbins.py"), str(lib.parent), "--archs", TARGETS],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "libkernels.so: removed cubins for sm_80, sm_86" in done.stdout
    loaded = load(lib)
    assert loaded["first"]["entries"] == FIRST and loaded["second"]["entries"] == SECOND


def test_the_recipe_hashes_every_python_file_the_pruner_needs() -> None:
    """A change to a sibling the image copies must change the build's inputs (Recipe.lean), as the pruner does."""
    from buildscripts.build.buildx import Recipe
    from buildscripts.workspace import Workspace

    lean = {p.name for p in Recipe.of(Workspace.at(ROOT)).lean}
    source = (LEAN / "fatbin_rewrite.py").read_text() + (LEAN / "prune_fatbins.py").read_text()
    imported = {a or b for a, b in re.findall(r"^(?:from (\w+) import|import (\w+))", source, re.M)}
    ours = {p.stem for p in (*LEAN.glob("*.py"), *(ROOT / "buildscripts" / "probe").glob("*.py"))}
    assert imported & ours == {"fatbin", "pruned", "fatbin_rewrite"}
    assert {"fatbin.py", "pruned.py", "fatbin_rewrite.py"} <= lean


@pytest.fixture
def pruner(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The pruner as a module; the import path it extends is put back afterwards."""
    monkeypatch.setattr(sys, "path", [str(LEAN), *sys.path])
    return importlib.import_module("prune_fatbins")


def test_only_rewrites_that_load_as_they_did_are_vouched_for(pruner: ModuleType) -> None:
    before = {"/s/old_torch.so": "undefined symbol: x", "/s/damaged.so": "undefined symbol: y",
              "/s/crashed.so": pruner.DIED + "exit -11"}
    after = {"/s/old_torch.so": "undefined symbol: x", "/s/damaged.so": "file too short",
             "/s/crashed.so": pruner.DIED + "exit -11", "/s/was_fine.so": "file too short"}
    assert pruner.unvouched(before, after) == {"/s/damaged.so": "file too short", "/s/was_fine.so": "file too short",
                                               "/s/crashed.so": pruner.DIED + "exit -11"}
    assert pruner.unvouched(before, before) == {"/s/crashed.so": pruner.DIED + "exit -11"}
    assert pruner.unvouched({}, {}) == {}


def fatbin_of(fatbin: ModuleType, offset: int, *entries: tuple[str, int, int]) -> object:
    """A parsed fatbin at `offset` in its section: (kind, arch, raw size) per entry, raw bytes all arch % 256."""
    parsed = [(fatbin.Entry(kind, arch, "", False, ""), bytes([arch % 256]) * size) for kind, arch, size in entries]
    head = struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, sum(size for _k, _a, size in entries))
    return fatbin.Fatbin(offset, head, parsed)


def test_fatbins_are_packed_from_the_start_and_a_pinned_one_stays(pruner: ModuleType) -> None:
    rewrite, fatbin = sys.modules["fatbin_rewrite"], sys.modules["fatbin"]
    boxes = [fatbin_of(fatbin, 0, ("sass", 80, 100), ("sass", 90, 40)),
             fatbin_of(fatbin, 160, ("sass", 86, 50), ("ptx", 90, 30))]
    starts = [BASE, BASE + 160]
    free = rewrite.pack(boxes, starts, set(), BASE, TARGETS.split(","))
    assert free.moved == {BASE: BASE, BASE + 160: BASE + 16 + 40}
    assert free.dropped == {"sm_80": 100, "sm_86": 50}
    assert len(free.body) == 16 + 40 + 16 + 30 and bytes([90]) * 40 in free.body and bytes([80]) * 100 not in free.body
    pinned = rewrite.pack(boxes, starts, {BASE + 160}, BASE, TARGETS.split(","))
    assert pinned.moved == {BASE: BASE, BASE + 160: BASE + 160}
    assert pinned.body[56:160] == bytes(104) and len(pinned.body) == 160 + 16 + 30


def test_the_cut_moves_only_offsets_from_the_old_section_end(pruner: ModuleType) -> None:
    cut = sys.modules["fatbin_rewrite"].Cut(end=0x9000, size=0x3000)
    assert cut.moved(0x8FFF) == 0x8FFF and cut.moved(0x9000) == 0x6000 and cut.moved(0xA123) == 0x7123
