"""A copy of the project whose one cell builds in seconds, for running the real `python -m buildscripts build`
(the real CLI, pipeline, BuildKit, engine and probe) where a real SGLang cell would take an hour.

The copy has the package itself (asking for 1 GB free instead of a real cell's 12), a matrix of one cell
on the project's own bookworm base (the same base image: its inputs are the same), lockfiles that say so
(empty bodies: nothing is installed), and a Dockerfile whose `cell` stage takes `build_s` seconds in a
RUN with the build's secrets mounted and installs a `torch` whose import takes `import_s` seconds (so a
verification is seen mid-stage). A `nonce` makes each copy's build steps and candidate tag its own (no
BuildKit cache shared between tests).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from buildscripts import matrix
from buildscripts.build.buildx import Recipe
from buildscripts.lock import lockfile, state
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
CELL = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"
MATRIX = """\
schema: 1
bases:
  bookworm:
    debootstrap: {{suite: bookworm, variant: minbase}}
    python: "3.11"
    platform: x86_64-manylinux_2_36
archs: [sm_90a]
cuda:
  cu130: {{version: "13.0"}}
torch_lanes:
  - {{torch: 2.11.0, cuda: cu130}}
sglang:
  - {{version: 0.5.16, torch: 2.11.0}}
toolkits:
  none: {{description: nothing}}
tags: {{repository: sglang-images-test-{nonce}}}
expect:
  - match: "*-none-*"
    stage: import
    class: required-module-missing
    reason: the tiny image has a stand-in torch and no SGLang
"""
DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${{BASE_IMAGE}} AS cell
ARG CELL_JSON
RUN --mount=type=secret,id=ca --mount=type=secret,id=index echo building {nonce} && sleep {build_s}
RUN mkdir -p /usr/lib/python3/dist-packages/torch && \\
    printf 'import time\\ntime.sleep({import_s})\\n' > /usr/lib/python3/dist-packages/torch/__init__.py
COPY ${{CELL_JSON}} /etc/sglang-images/cell.json
"""


@dataclass(frozen=True)
class TinyProject:
    root: Path
    runs: Path

    def argv(self, *args: str) -> list[str]:
        """`python -m buildscripts ARGS`, to run with cwd=root (the copy's package, not the project's)."""
        return [sys.executable, "-m", "buildscripts", *args]

    def results(self, run_id: str) -> Path:
        return self.runs / run_id / "results.json"


def make(root: Path, *, nonce: str, build_s: int, import_s: int) -> TinyProject:
    shutil.copytree(ROOT / "buildscripts", root / "buildscripts", ignore=shutil.ignore_patterns("__pycache__"))
    _room_for_a_tiny_cell(root / "buildscripts" / "engine.py")
    recipe = Recipe.of(Workspace.at(ROOT))
    for path in (recipe.toolkit_script, recipe.lxc_init, recipe.empty_lock, *recipe.lean):  # what the inputs hash reads
        copy = root / path.relative_to(ROOT)
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
    (root / "images" / "Dockerfile").write_text(DOCKERFILE.format(nonce=nonce, build_s=build_s, import_s=import_s))
    (root / "matrix.yaml").write_text(MATRIX.format(nonce=nonce))
    _lock(root)
    return TinyProject(root, root / "runs")


def _room_for_a_tiny_cell(engine_py: Path) -> None:
    """`build` refuses to start below the free disk a real cell needs (about 12 GB); this cell adds a few
    kilobytes to the base, so the copy asks for 1 GB (a shared machine's other builds may hold the rest)."""
    text = engine_py.read_text()
    line = "MIN_FREE_BYTES = 12 * 1024**3"
    assert line in text, f"{engine_py} no longer has {line!r}"
    engine_py.write_text(text.replace(line, "MIN_FREE_BYTES = 1 * 1024**3"))


def _lock(root: Path) -> None:
    """Lockfiles and index.json as `nox -s lock` would write them for this matrix, with nothing to install."""
    locks = root / "lockfiles"
    shutil.copytree(ROOT / "lockfiles", locks, ignore=lambda folder, names: [
        n for n in names if n not in ("bootstrap.txt",) and Path(folder, n).is_file()])
    tiny = matrix.load(root / "matrix.yaml", {})
    (cell,) = [c for c in tiny.cells if c.id == CELL]
    inputs = state.cell_inputs(tiny, cell)
    paths = state.paths_for(cell, locks)
    below: lockfile.Lockfile | None = None
    for layer, path in (("lane", paths.lane), ("sglang", paths.sglang)):
        header = {"inputs-sha256": state.layer_inputs_hash(inputs, layer)}
        if below is not None:
            header["constraints-sha256"] = lockfile.sha256(below.body)
        below = lockfile.Lockfile(header=header, body=f"# {layer}: nothing to install\n")
        lockfile.write(path, below)
    entry = {"state": "ok", "reason": None, "inputs": inputs, "inputs-sha256": lockfile.inputs_hash(inputs),
             "versions": state.recorded_versions(cell, locks),   # what these (empty) locks install: nothing
             "locks": {"lane": str(paths.lane.relative_to(locks)), "sglang": str(paths.sglang.relative_to(locks))}}
    state.write_index(locks, {"format": state.LOCK_FORMAT, "cells": {CELL: entry}})
    json.loads(state.index_path(locks).read_text())   # written, and readable
