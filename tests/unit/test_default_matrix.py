"""Which matrix file a command reads when none is named: the folder's own, and only where the package is installed
from the wheel (no checkout around it) and the folder has none, the copy the wheel carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts import workspace


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package as the wheel installs it: in site-packages, no matrix.yaml beside it, its own copy in data/."""
    site = tmp_path / "site-packages"
    (site / "buildscripts" / "data").mkdir(parents=True)
    packaged = site / "buildscripts" / "data" / "matrix.yaml"
    packaged.write_text("# the release's matrix\n")
    monkeypatch.setattr(workspace, "PROJECT_ROOT", site)
    monkeypatch.setattr(workspace, "PACKAGED_MATRIX", packaged)
    return packaged


def test_installed_and_the_folder_has_none_reads_the_wheels_copy(installed: Path, tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    assert workspace.Workspace.at(folder).matrix == installed


def test_the_folders_own_matrix_comes_first(installed: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "matrix.yaml").write_text("# mine\n")
    assert workspace.Workspace.at(folder).matrix == (folder / "matrix.yaml").resolve()


def test_a_named_matrix_is_read_as_named(installed: Path, tmp_path: Path) -> None:
    named = tmp_path / "other.yaml"
    assert workspace.Workspace.at(tmp_path, matrix=named).matrix == named


def test_in_a_checkout_a_missing_matrix_stays_missing(tmp_path: Path) -> None:
    """In the checkout the copy is a link to the checkout's own file: another folder without one must not
    silently read it."""
    assert (workspace.PROJECT_ROOT / "matrix.yaml").is_file()
    assert workspace.Workspace.at(tmp_path).matrix == tmp_path.resolve() / "matrix.yaml"


def test_the_packaged_copy_is_the_checkouts_matrix() -> None:
    """One file, one home: the copy the wheel carries is a link to matrix.yaml, never a second file to keep."""
    assert workspace.PACKAGED_MATRIX.is_symlink()
    assert workspace.PACKAGED_MATRIX.resolve() == (workspace.PROJECT_ROOT / "matrix.yaml").resolve()
