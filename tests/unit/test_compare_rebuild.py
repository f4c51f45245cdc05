"""`compare --rebuild CELL`: its arguments, and the build aside it stands on (aside.py) refusing before anything is
built when the cell has no image of its inputs as they are now (the real cold rebuild of the pip cell:
benchmarks/cell-rebuild.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from buildscripts import aside, cli, engine, pipeline
from buildscripts.build import footprint
from buildscripts.commands import compare
from buildscripts.errors import SelectionError
from buildscripts.matrix import Cell
from buildscripts.matrix.load import load
from buildscripts.pipeline_options import BuildOptions
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]


def test_two_images_or_one_cell(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path)
    two = compare.parse(["a:1", "b:2"], ws, {})
    assert (two.a, two.b, two.rebuild) == ("a:1", "b:2", False)
    one = compare.parse(["--rebuild", "cell-x", "--keep"], ws, {})
    assert (one.a, one.b, one.rebuild, one.keep) == ("cell-x", "", True, True)
    assert one.out == ws.runs / "compare" / "rebuild-cell-x"


@pytest.mark.parametrize("argv", [["--rebuild", "cell-x", "a:1"], ["a:1"], [], ["a:1", "b:2", "--keep"],
                                  ["a:1", "b:2", "--builder", "other"]])
def test_a_mixed_or_short_command_line_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["compare", *argv], {})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_a_cell_the_matrix_does_not_build_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    from buildscripts.rebuild_cell import cell_of

    matrix = load(ROOT / "matrix.yaml")
    with pytest.raises(SelectionError, match="is no cell of the matrix"):
        cell_of(matrix, "no-such-cell")
    excluded = next(c for c in matrix.cells if c.excluded)
    with pytest.raises(SelectionError, match="is excluded"):
        cell_of(matrix, excluded.id)


class _Images:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def get(self, ref: str) -> Any:
        import docker.errors

        raise docker.errors.ImageNotFound(ref)

    def remove(self, ref: str, **_: Any) -> None:
        self.removed.append(ref)


def test_without_the_builds_image_nothing_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild is held against the image the build made of the same inputs: with none, the hour of building
    would compare with nothing, so it is refused first, with the command that makes it."""
    client = SimpleNamespace(images=_Images())
    built: list[str] = []
    monkeypatch.setattr(engine, "connect", lambda: client)
    monkeypatch.setattr(engine, "check", lambda c: engine.Engine("20.10", str(tmp_path), (), ""))
    monkeypatch.setattr(engine, "check_disk", lambda found, cells: None)
    monkeypatch.setattr(footprint, "make_room", lambda *args: None)
    prepared = SimpleNamespace(builder=SimpleNamespace(name="default", driver="docker"),
                               candidates={"cell-x": ("abc", "sglang-images:cell-x-abc")})
    monkeypatch.setattr(pipeline, "prepare", lambda *args: prepared)
    monkeypatch.setattr(pipeline, "run_cell", lambda *args: built.append("built"))
    matrix = load(ROOT / "matrix.yaml")
    opts = BuildOptions(ws=Workspace.at(tmp_path), matrix=matrix, env={}, run_id="rebuild-cell-x", verify=False)
    cell = cast(Cell, SimpleNamespace(id="cell-x"))
    with pytest.raises(SelectionError, match="no image of cell-x") as refused, \
            aside.built(aside.Aside(matrix, "-rebuild"), cell, opts, against_candidate=True):
        pass
    assert "nox -s build -- --only cell-x --no-verify" in (refused.value.hint or "")
    assert built == []
