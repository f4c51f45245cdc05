"""A step's locks as a lockfiles folder that a build accepts: the composed layer locks at the cell's paths, the
bootstrap lock the base is made from, and an `index.json` entry for the cell written as `nox -s lock` writes it.

A build takes nothing on trust here: the folder is handed to the lock step's own state check (`status_of`), the
one a build asks before it builds, and a folder it would not build from is refused with its reason. That check
is the route by which these locks are accepted: their bodies are `uv pip compile`'s entries, whole (compose.py),
each header's content hash is of its body, the constraints hashes chain, and the inputs hashes are the good
side's, which are matrix.yaml's when the good side was locked from it. Nothing is half-written: the folder is
filled beside its place and swapped in whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from .. import disk
from ..errors import BisectError
from ..lock import lockfile
from ..lock.lockfile import Lockfile
from ..lock.state import (
    LOCK_FORMAT,
    cell_inputs,
    paths_for,
    recorded_versions,
    status_of,
    write_index,
)
from ..matrix import Cell, Matrix

BOOTSTRAP = "bootstrap.txt"   # the base's own lock (build/base.py): the same base as the normal build's


def layer_paths(cell: Cell, locks: Path) -> tuple[tuple[str, Path], ...]:
    """(layer, path) of each lock the cell installs, in install order."""
    paths = paths_for(cell, locks)
    found = (("lane", paths.lane), ("sglang", paths.sglang), ("toolkit", paths.toolkit))
    return tuple((layer, path) for layer, path in found if path is not None)


def write_step_folder(out: Path, matrix: Matrix, cell: Cell, locks: tuple[Lockfile, ...], *,
                      project_locks: Path) -> Path:
    """Write `locks` (the cell's layer locks, lane first) as the lockfiles folder `out`, checked as a build checks
    it; `project_locks` is the project's lockfiles/ (its bootstrap lock is copied: the step builds on the same
    base). Returns `out`; a folder the state check refuses is not left behind."""
    wanted = layer_paths(cell, out)
    if len(wanted) != len(locks):
        msg = (f"{cell.id} installs {len(wanted)} layer lock(s) ({', '.join(n for n, _ in wanted)}) but the step "
               f"has {len(locks)}")
        raise BisectError(msg, hint="bisect two sides of this cell as the matrix defines it now")
    fresh = disk.new_folder(out)
    try:
        for (_, path), lock in zip(layer_paths(cell, fresh), locks, strict=True):
            lockfile.write(path, lock)
        bootstrap = project_locks / BOOTSTRAP
        if bootstrap.is_file():
            shutil.copyfile(bootstrap, fresh / BOOTSTRAP)
        write_index(fresh, {"format": LOCK_FORMAT, "cells": {cell.id: _entry(matrix, cell, fresh)}})
        _accepted(matrix, cell, fresh)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    return disk.replace_folder(fresh, out)


def _entry(matrix: Matrix, cell: Cell, locks: Path) -> dict[str, Any]:
    """The cell's index entry as `nox -s lock` writes one for a cell whose every layer resolved (lock/locking.py)."""
    inputs = cell_inputs(matrix, cell)
    return {"state": "ok", "reason": None, "inputs": inputs, "inputs-sha256": lockfile.inputs_hash(inputs),
            "versions": recorded_versions(cell, locks),
            "locks": {layer: str(path.relative_to(locks)) for layer, path in layer_paths(cell, locks)}}


def _accepted(matrix: Matrix, cell: Cell, locks: Path) -> None:
    """The build's own check of the folder (pipeline.check_locks asks the same): anything but ok is refused."""
    status = status_of(matrix, cell, locks)
    if status.state != "ok":
        msg = f"a build would not take the step's locks of {cell.id}: {status.state} ({status.reason})"
        raise BisectError(msg, hint="the good side must be locked from this matrix.yaml (`nox -s lock`); a side "
                                    "locked from other inputs cannot be built with it")
