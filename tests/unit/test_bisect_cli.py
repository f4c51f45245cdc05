"""The lock diff of two small locks in the project's format, and `bisect --dry-run` on them from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts.bisect.diff import Kind, lock_diff
from buildscripts.bisect.sources import read_side
from buildscripts.commands import bisect
from buildscripts.errors import LockError, SelectionError
from buildscripts.workspace import Workspace
from tests.bisect_locks import entry, write_lock
from tests.commands import call

CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


@pytest.fixture
def locks(tmp_path: Path) -> tuple[Path, Path]:
    good = write_lock(tmp_path / "good.txt", entry("torch", "2.11.0", "a"), entry("triton", "3.5.0", "a"),
                      entry("Flash_Attn", "2.8.0", "a"), entry("numpy", "2.3.0", "a"), entry("filecheck", "1.0.6", "a"))
    bad = write_lock(tmp_path / "bad.txt", entry("torch", "2.11.0", "a"), entry("triton", "3.5.1", "a"),
                     entry("flash-attn", "2.8.0", "a", "b"), entry("numpy", "2.3.0", "a"),
                     entry("cython", "3.3.1", "a"))
    return good, bad


def test_the_diff_names_each_package_once_as_added_removed_moved_or_rehashed(locks: tuple[Path, Path]) -> None:
    good, bad = (read_side(str(p), (), p.parent) for p in locks)
    changes = lock_diff(good.pins, bad.pins)
    assert [(c.name, c.kind) for c in changes] == [
        ("cython", Kind.ADDED), ("filecheck", Kind.REMOVED), ("flash-attn", Kind.HASH), ("triton", Kind.VERSION)]
    assert [c.line() for c in changes] == [
        "+ cython 3.3.1", "- filecheck 1.0.6", "# flash-attn 2.8.0 (other hashes: 1 new, 0 gone)",
        "~ triton 3.5.0 -> 3.5.1"]


def test_a_lock_edited_by_hand_is_refused(locks: tuple[Path, Path]) -> None:
    good, _ = locks
    good.write_text(good.read_text().replace("triton==3.5.0", "triton==3.4.0"))
    with pytest.raises(LockError, match="edited by hand"):
        read_side(str(good), (), good.parent)


def test_dry_run_prints_the_diff_and_the_groups(locks: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = locks
    ws = Workspace.at(runs=tmp_path / "runs")
    assert call(bisect, [CELL, "--good", str(good), "--bad", str(bad), "--dry-run", "--no-resolve"], ws) == 0
    out = capsys.readouterr().out
    assert "4 change(s):" in out and "  ~ triton 3.5.0 -> 3.5.1" in out and "  + cython 3.3.1" in out
    assert "4 group(s) (not checked: --no-resolve, each change alone)" in out
    assert "budget: 12 builds" in out
    assert not (tmp_path / "runs").exists()   # a dry run writes nothing


def test_a_bisection_of_a_cell_the_matrix_lacks_stops_after_the_plan(locks: tuple[Path, Path], tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = locks
    ws = Workspace.at(runs=tmp_path / "runs")
    with pytest.raises(SelectionError, match=r"no-such-cell is no cell of .*a step cannot build it"):
        call(bisect, ["no-such-cell", "--good", str(good), "--bad", str(bad), "--stage", "import", "--no-resolve"],
             ws)
    assert "~ triton 3.5.0 -> 3.5.1" in capsys.readouterr().out   # the plan came first
    assert not (tmp_path / "runs").exists()                         # and no step was written


def test_a_bisection_needs_the_stage_it_bisects(locks: tuple[Path, Path]) -> None:
    good, bad = locks
    with pytest.raises(SystemExit) as exc:
        bisect.parse([CELL, "--good", str(good), "--bad", str(bad)], Workspace.at(), {})
    assert exc.value.code == 2
