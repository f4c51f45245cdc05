"""Where each cell's locks live, what they were made from, and whether they still hold.

Cheap by design (no resolver call): the build asks `status_of` for every cell before building.
`lockfiles/index.json` (written by `nox -s lock`) records per cell its state, the reason when it
cannot be built, the inputs it was locked from and the key resolved versions for the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import LockError
from ..matrix import Cell, Matrix
from ..results.store import read_json
from . import drift, lockfile

LOCK_FORMAT = 1
State = Literal["ok", "missing", "stale", "incompatible", "unresolvable"]
STATES = ("ok", "incompatible", "unresolvable")  # what lockfiles/index.json may record
LAYERS = ("lane", "sglang", "toolkit")
# Which of a cell's inputs each layer depends on (each layer also depends on the one below it).
LAYER_KEYS: dict[str, tuple[str, ...]] = {
    "lane": ("format", "python", "platform", "torch", "cuda", "index", "lane-sglang"),
    "sglang": ("sglang", "declared-torch", "sglang-compiler"),
    "toolkit": ("toolkit", "toolkit-requirements"),
}


@dataclass(frozen=True)
class LockPaths:
    lane: Path
    sglang: Path
    toolkit: Path | None


@dataclass(frozen=True)
class LockStatus:
    state: State
    reason: str | None
    versions: dict[str, str] = field(default_factory=dict)


def toolkit_requirements(cell: Cell) -> tuple[str, ...]:
    return cell.toolkit.pip.get(cell.lane.cuda, ())


def paths_for(cell: Cell, locks: Path) -> LockPaths:
    """Where the cell's layer locks live under the lockfiles folder `locks`."""
    base = locks
    toolkit = base / "toolkits" / f"{cell.id}.txt" if toolkit_requirements(cell) else None
    return LockPaths(
        lane=base / "lanes" / f"{cell.lane_layer_id}.txt",
        sglang=base / "sglang" / f"{cell.sglang_layer_id}.txt",
        toolkit=toolkit,
    )


def lane_sglang_versions(matrix: Matrix, cell: Cell) -> list[str]:
    """The SGLang versions built on this cell's lane: the lane lock is shaped so they all fit on it."""
    found: list[str] = []
    for other in matrix.buildable():
        if other.lane_layer_id == cell.lane_layer_id and other.sglang.version not in found:
            found.append(other.sglang.version)
    return found


def cell_inputs(matrix: Matrix, cell: Cell) -> dict[str, Any]:
    """Everything in matrix.yaml that a cell's locks depend on (and nothing from the host)."""
    return {
        "format": LOCK_FORMAT,
        "python": cell.base.python,
        "platform": cell.base.platform,
        "torch": cell.lane.torch,
        "cuda": cell.lane.cuda,
        "index": cell.lane.index,
        "lane-sglang": lane_sglang_versions(matrix, cell),
        "sglang": cell.sglang.version,
        "declared-torch": cell.sglang.torch,
        "sglang-compiler": drift.compiler_constraints(cell.lane),
        "toolkit": cell.toolkit_name,
        "toolkit-requirements": list(toolkit_requirements(cell)),
    }


def layer_inputs_hash(inputs: dict[str, Any], layer: str) -> str:
    upto = LAYERS[: LAYERS.index(layer) + 1]
    return lockfile.inputs_hash({k: inputs[k] for name in upto for k in LAYER_KEYS[name]})


# ---------------------------------------------------------------- index.json


def index_path(locks: Path) -> Path:
    return locks / "index.json"


def read_index(locks: Path) -> dict[str, Any]:
    path = index_path(locks)
    if not path.exists():
        return {"format": LOCK_FORMAT, "cells": {}}
    data = read_json(path, LockError, "run `nox -s lock` to write it again")
    if not isinstance(data, dict) or data.get("format") != LOCK_FORMAT:
        msg = f"{path} has another format than {LOCK_FORMAT}"
        raise LockError(msg, hint="run `nox -s lock -- --upgrade`")
    problem = _index_problem(data)
    if problem:
        msg = f"{path} is malformed: {problem}"
        raise LockError(msg, hint="never edit it by hand; run `nox -s lock` to write it again")
    return data


def _index_problem(data: dict[str, Any]) -> str | None:
    """What makes the index unusable (it is generated, so any of this means it was edited or damaged)."""
    cells = data.get("cells")
    if not isinstance(cells, dict):
        return "`cells` is not a mapping of cell id to entry"
    for cell_id, entry in cells.items():
        if not isinstance(entry, dict):
            return f"cells.{cell_id} is not a mapping"
        if entry.get("state") not in STATES:
            return f"cells.{cell_id}.state is {entry.get('state')!r}, not one of {', '.join(STATES)}"
        for key, kind in (("inputs-sha256", str), ("inputs", dict), ("versions", dict), ("locks", dict)):
            if not isinstance(entry.get(key), kind):
                return f"cells.{cell_id}.{key} is missing or not a {kind.__name__}"
        if not all(isinstance(v, str) for v in (*entry["versions"].values(), *entry["locks"].values())):
            return f"cells.{cell_id}: versions and locks must be text"
        if not isinstance(entry.get("reason"), str | None):
            return f"cells.{cell_id}.reason is not text"
    return None


def write_index(locks: Path, data: dict[str, Any]) -> None:
    path = index_path(locks)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------- status


def status_of(matrix: Matrix, cell: Cell, locks: Path) -> LockStatus:
    """Can this cell be built from its locks? Reads files only; never resolves."""
    entry = read_index(locks)["cells"].get(cell.id)
    if entry is None:
        return LockStatus("missing", "not in lockfiles/index.json: never locked")
    current = cell_inputs(matrix, cell)
    if entry.get("inputs-sha256") != lockfile.inputs_hash(current):
        return LockStatus("stale", _what_changed(entry.get("inputs", {}), current))
    versions = dict(entry.get("versions", {}))
    problem = file_problem(cell, locks, current)
    if entry["state"] in ("incompatible", "unresolvable"):
        # The locker writes a layer's lock only when it resolved: all of them present and current means
        # this cell locked fine, and the recorded state was changed by hand (which would skip the cell).
        if problem is None:
            return LockStatus("stale", f"recorded as {entry['state']} in lockfiles/index.json, but its locks are "
                                       "all present and current: the index was edited by hand")
        return LockStatus(entry["state"], entry.get("reason"), versions)
    if problem is None and versions != recorded_versions(cell, locks):
        problem = LockStatus("stale", "the versions recorded in lockfiles/index.json are not those of its locks: "
                                      "the index was edited by hand")
    return problem or LockStatus("ok", None, versions)


def recorded_versions(cell: Cell, locks: Path) -> dict[str, str]:
    """The key versions the cell's locks install, as `nox -s lock` records them (recomputed from the files)."""
    installed: dict[str, str] = {}
    for path in (p for p in vars(paths_for(cell, locks)).values() if p is not None):
        installed = drift.overlay(installed, lockfile.read(path).versions())
    return drift.key_versions(installed)


def _what_changed(recorded: dict[str, Any], current: dict[str, Any]) -> str:
    changed = [
        f"{key} {recorded.get(key)!r} -> {current.get(key)!r}"
        for key in sorted(current.keys() | recorded.keys())
        if recorded.get(key) != current.get(key)
    ]
    return "locked from other inputs (another matrix.yaml?): " + "; ".join(changed)


def file_problem(cell: Cell, locks: Path, inputs: dict[str, Any]) -> LockStatus | None:
    """The first reason this cell's lock files cannot be trusted, or None."""
    paths = paths_for(cell, locks)
    below: lockfile.Lockfile | None = None
    for layer, path in (("lane", paths.lane), ("sglang", paths.sglang), ("toolkit", paths.toolkit)):
        if path is None:
            continue
        shown = path.relative_to(locks.parent)
        if not path.is_file():
            return LockStatus("missing", f"{shown} is missing: run `nox -s lock`")
        try:
            lock = lockfile.read(path)
        except LockError as exc:
            return LockStatus("stale", exc.message)
        if lock.edited_by_hand():
            return LockStatus("stale", f"{shown} was edited by hand (content-sha256 does not match)")
        if lock.header.get("inputs-sha256") != layer_inputs_hash(inputs, layer):
            return LockStatus("stale", f"{shown} was locked from other inputs than matrix.yaml's")
        if below is not None and lock.header.get("constraints-sha256") != below.header["content-sha256"]:
            return LockStatus("stale", f"{shown} was resolved against an older lock of the layer below")
        below = lock
    return None
