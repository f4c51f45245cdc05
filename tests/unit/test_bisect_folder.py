"""A step's locks written as a lockfiles folder: accepted by the lock step's own reader and state check, the one
a build asks (status_of), built from the project's committed locks of a real cell with packages moved in."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from buildscripts import matrix as matrix_mod
from buildscripts.bisect.compose import composed_locks
from buildscripts.bisect.diff import lock_diff
from buildscripts.bisect.folder import layer_paths, write_step_folder
from buildscripts.bisect.sources import Side, read_side
from buildscripts.errors import BisectError
from buildscripts.lock import lockfile
from buildscripts.lock.lockfile import Lockfile, sha256
from buildscripts.lock.state import read_index, recorded_versions, status_of
from buildscripts.matrix import Cell, Matrix

ROOT = Path(__file__).resolve().parents[2]
CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"   # three layers: lane, SGLang, toolkit
PROJECT_LOCKS = ROOT / "lockfiles"


@pytest.fixture(scope="module")
def project() -> tuple[Matrix, Cell]:
    matrix = matrix_mod.load(ROOT / "matrix.yaml")
    return matrix, next(c for c in matrix.cells if c.id == CELL)


def _good(cell: Cell) -> Side:
    layers = tuple(p.relative_to(PROJECT_LOCKS).as_posix() for _, p in layer_paths(cell, PROJECT_LOCKS))
    return read_side(str(PROJECT_LOCKS), layers, ROOT)


def _moved(lock: Lockfile, name: str, version: str) -> Lockfile:
    """`lock` with `name` pinned at `version`, its content hash made again as the lock step makes it."""
    body = re.sub(rf"^{re.escape(name)}=={re.escape(lock.pins[name].version)} ", f"{name}=={version} ", lock.body,
                  count=1, flags=re.MULTILINE)
    assert body != lock.body
    return replace(lock, body=body, header={**lock.header, "content-sha256": sha256(body)})


def _bad(good: Side, name: str, version: str) -> Side:
    return Side("bad", good.where, tuple(_moved(lock, name, version) if name in lock.pins else lock
                                         for lock in good.locks))


def test_the_folder_of_a_step_is_accepted_by_the_build_s_lock_check(project: tuple[Matrix, Cell],
                                                                     tmp_path: Path) -> None:
    matrix, cell = project
    good = _good(cell)
    assert status_of(matrix, cell, PROJECT_LOCKS).state == "ok"          # the project's locks are current
    bad = _bad(_bad(good, "numpy", "9.9.9"), "sglang", "9.9.9")
    changes = lock_diff(good.pins, bad.pins)
    assert [c.name for c in changes] == ["numpy", "sglang"]
    numpy = [c for c in changes if c.name == "numpy"]
    out = write_step_folder(tmp_path / "step-1" / "lockfiles", matrix, cell, composed_locks(good, bad, numpy),
                            project_locks=PROJECT_LOCKS)
    status = status_of(matrix, cell, out)
    assert status.state == "ok", status.reason
    for _, path in layer_paths(cell, out):
        assert not lockfile.verify(path).edited_by_hand()
    installed: dict[str, str] = {}
    for _, path in layer_paths(cell, out):
        installed |= lockfile.read(path).versions()
    assert installed["numpy"] == "9.9.9" and installed["sglang"] == good.pins["sglang"].version   # not moved
    entry = read_index(out)["cells"][CELL]
    assert entry["versions"] == recorded_versions(cell, out) and entry["state"] == "ok"
    assert (out / "bootstrap.txt").read_bytes() == (PROJECT_LOCKS / "bootstrap.txt").read_bytes()
    assert list(out.parent.iterdir()) == [out]                           # nothing beside it


def test_a_good_side_locked_from_other_inputs_is_refused_and_nothing_is_left(project: tuple[Matrix, Cell],
                                                                             tmp_path: Path) -> None:
    matrix, cell = project
    good = _good(cell)
    other = tuple(replace(lock, header={**lock.header, "inputs-sha256": sha256("another matrix")})
                  for lock in good.locks)
    with pytest.raises(BisectError, match=r"a build would not take the step's locks.*stale"):
        write_step_folder(tmp_path / "step-1" / "lockfiles", matrix, cell, other, project_locks=PROJECT_LOCKS)
    assert list((tmp_path / "step-1").iterdir()) == []


def test_a_step_with_another_number_of_layers_than_the_cell_is_refused(project: tuple[Matrix, Cell],
                                                                       tmp_path: Path) -> None:
    matrix, cell = project
    good = _good(cell)
    with pytest.raises(BisectError, match="installs 3 layer lock"):
        write_step_folder(tmp_path / "lockfiles", matrix, cell, good.locks[:2], project_locks=PROJECT_LOCKS)
    assert not (tmp_path / "lockfiles").exists()


def test_a_step_folder_written_again_is_replaced_whole(project: tuple[Matrix, Cell], tmp_path: Path) -> None:
    matrix, cell = project
    good = _good(cell)
    bad = _bad(good, "numpy", "9.9.9")
    out = tmp_path / "lockfiles"
    write_step_folder(out, matrix, cell, composed_locks(good, bad, lock_diff(good.pins, bad.pins)),
                      project_locks=PROJECT_LOCKS)
    write_step_folder(out, matrix, cell, good.locks, project_locks=PROJECT_LOCKS)
    assert recorded_versions(cell, out) == recorded_versions(cell, PROJECT_LOCKS)
    assert status_of(matrix, cell, out).state == "ok"
