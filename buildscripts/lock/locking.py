"""The locks of the selected cells: resolve every layer of theirs and record it (`lock_cells`), or check that each
is current (`check`: CI's guard). What `python -m buildscripts lock` runs (commands/lock.py).

A cell whose resolution breaks the matrix's promise (torch version, CUDA flavour, SGLang's own torch pin, toolkit
coherence) is recorded as `incompatible` with the reason, one whose packages cannot be fetched as `unresolvable`;
neither fails the run, neither is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import log
from ..errors import LockError
from ..hostenv import uv_settings
from ..matrix import Cell, Matrix
from ..workspace import Workspace
from . import drift
from .layers import LayerLocker, LayerOutcome
from .lockfile import inputs_hash
from .resolver import uv_version
from .state import LOCK_FORMAT, LockStatus, cell_inputs, paths_for, read_index, status_of, write_index

STATUS_MARK = {"ok": "passed", "incompatible": "failed", "unresolvable": "failed"}


def check(matrix: Matrix, cells: list[Cell], ws: Workspace) -> int:
    """CI's guard: every selected cell has locks made from the current matrix.yaml."""
    bad: list[str] = []
    for cell in cells:
        status = status_of(matrix, cell, ws.locks)
        mark = "passed" if status.state == "ok" else "skipped"
        if status.state in ("stale", "missing"):
            bad.append(f"{cell.id} ({status.state}: {status.reason})")
            mark = "failed"
        log.step(cell.id, f"lock {status.state}", mark, detail=status.reason or "")
    if bad:
        msg = f"{len(bad)} of {len(cells)} cell(s) have stale or missing locks:\n  " + "\n  ".join(bad)
        raise LockError(msg, hint="run `nox -s lock` and commit lockfiles/")
    log.info(f"all {len(cells)} selected cell(s) have current locks")
    return 0


def lock_cells(matrix: Matrix, cells: list[Cell], ws: Workspace, *, env: Mapping[str, str],
               upgrade: bool = False, prune: bool = False) -> dict[str, LockStatus]:
    """Lock every layer of `cells`, update lockfiles/index.json, print one line per layer lock.

    `env` is the environment the host's index settings are read from (PIP_*, UV_*)."""
    locker = LayerLocker(ws.locks, logs=ws.runs / "lock", upgrade=upgrade, env=uv_settings(env), uv=uv_version())
    index = read_index(ws.locks)
    entries: dict[str, Any] = {} if prune else dict(index["cells"])
    results: dict[str, LockStatus] = {}
    shown: set[tuple[str, str]] = set()
    for cell in cells:
        inputs = cell_inputs(matrix, cell)
        layers = [locker.lane(cell, inputs), locker.sglang(cell, inputs)]
        if paths_for(cell, ws.locks).toolkit is not None:
            layers.append(locker.toolkit(cell, inputs))
        for outcome in layers:
            _show_once(outcome, shown)
        results[cell.id] = status = _cell_status(layers)
        entries[cell.id] = {
            "state": status.state, "reason": status.reason, "inputs": inputs,
            "inputs-sha256": inputs_hash(inputs), "versions": status.versions,
            "locks": _lock_names(cell, ws.locks, layers),
        }
    write_index(ws.locks, {"format": LOCK_FORMAT, "cells": dict(sorted(entries.items()))})
    if prune:
        _remove_orphans(ws, locker.written)
    _summary(results)
    return results


def _cell_status(layers: list[LayerOutcome]) -> LockStatus:
    """The first layer that is not ok decides; versions come from what would be installed."""
    installed: dict[str, str] = {}
    for outcome in layers:
        installed = drift.overlay(installed, outcome.pins)
    versions = drift.key_versions(installed)
    failed = next((o for o in layers if o.state != "ok"), None)
    if failed is None:
        return LockStatus("ok", None, versions)
    return LockStatus(failed.state, failed.reason, versions)


def _lock_names(cell: Cell, locks: Path, layers: list[LayerOutcome]) -> dict[str, str]:
    paths = paths_for(cell, locks)
    names = {}
    for outcome in layers:
        path = getattr(paths, outcome.layer)
        if outcome.state == "ok" and path is not None:
            names[outcome.layer] = str(path.relative_to(locks))
    return names


def _show_once(outcome: LayerOutcome, shown: set[tuple[str, str]]) -> None:
    """One line per layer lock, the first time a cell reaches it (cells share layers)."""
    if (outcome.layer, outcome.layer_id) in shown:
        return
    shown.add((outcome.layer, outcome.layer_id))
    what = f"{outcome.layer} lock" + (" (up to date)" if outcome.reused else "")
    detail = outcome.reason or ""
    log.step(outcome.layer_id, what, STATUS_MARK.get(outcome.state, "failed"),
             None if outcome.reused else outcome.seconds, detail)


def _remove_orphans(ws: Workspace, keep: set[Path]) -> None:
    """After a full run, lock files no cell uses any more are deleted (lockfiles/ is generated)."""
    for folder in ("lanes", "sglang", "toolkits"):
        for path in sorted((ws.locks / folder).glob("*.txt")):
            if path not in keep:
                path.unlink()
                log.info(f"removed {ws.shown(path)} (no cell uses it any more)")


def _summary(results: dict[str, LockStatus]) -> None:
    table = Table(title="locks", show_lines=False)
    for column in ("cell", "state", "torch", "cuda", "sglang", "nvcc", "reason"):
        table.add_column(column, overflow="fold")
    for cell_id, status in results.items():
        v = status.versions
        row = (cell_id, status.state, v.get("torch", ""), v.get("cuda", ""), v.get("sglang", ""), v.get("nvcc", ""),
               status.reason or "")
        table.add_row(*(escape(text) for text in row))
    log.console.print(table)
    counts: dict[str, int] = {}
    for status in results.values():
        counts[status.state] = counts.get(status.state, 0) + 1
    log.info(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
