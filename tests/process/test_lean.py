"""The lean recipe as the image runs it (`sh images/lean/lean.sh FLAVOUR RECIPE` on a folder), the
bytecode compiler, which imports a layer's entry points in a child interpreter, and the package measure
as the size report runs it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildscripts.probe import sitesize
from buildscripts.report import sizes
from tests import image_scripts

ROOT = Path(__file__).resolve().parents[2]


def test_lean_applies_flavour_lines_to_that_flavour_only(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.txt"
    recipe.write_text("cu130: dsl/cu12  # CUDA 12 libraries in a CUDA 13 cell\nlib/*.a  # static archives\n")
    for flavour, kept in (("cu130", False), ("cu128", True)):
        site = tmp_path / flavour
        (site / "dsl" / "cu12").mkdir(parents=True)
        (site / "lib").mkdir()
        (site / "lib" / "x.a").write_bytes(b"0" * 2048)
        (site / "lib" / "x.so").write_bytes(b"0")
        done = subprocess.run(["sh", str(ROOT / "images" / "lean" / "lean.sh"), flavour, str(recipe)],
                              env={**os.environ, "LEAN_SITE": str(site)}, capture_output=True, text=True,
                              check=True)
        assert (site / "dsl" / "cu12").exists() is kept
        assert not (site / "lib" / "x.a").exists() and (site / "lib" / "x.so").exists()
        assert "lean: removed lib/x.a" in done.stdout



def test_bytecode_compiles_what_the_entry_points_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bytecode = image_scripts.load(ROOT / "images" / "bytecode.py")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import used\n")
    (tmp_path / "pkg" / "used.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "unused.py").write_text("Y = 2\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('needs a GPU')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert bytecode.main([str(tmp_path), "pkg", "broken"]) == 0
    assert "importing broken failed (RuntimeError: needs a GPU)" in capsys.readouterr().out
    pyc = Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "used.py")))
    first = pyc.read_bytes()
    assert int.from_bytes(first[4:8], "little") == 0b11  # hash-based, checked at import
    assert Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "__init__.py"))).exists()
    assert not Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "unused.py"))).exists()
    assert not (tmp_path / "__pycache__").exists() or not list((tmp_path / "__pycache__").glob("broken*"))
    pyc.unlink()
    assert bytecode.main([str(tmp_path), "pkg"]) == 0
    assert pyc.read_bytes() == first  # the same source gives the same bytes: reproducible layers


def test_the_package_measure_runs_as_the_size_report_runs_it() -> None:
    """`report/sizes.py` runs probe/sitesize.py's source with `python3 -c`: it must stand alone."""
    done = subprocess.run([sys.executable, "-c", Path(sitesize.__file__).read_text(), "3"],
                          capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    parts = sizes.packages_from_json(done.stdout)
    assert 1 <= len(parts) <= 3 and all(p.size_bytes > 0 for p in parts)
    assert [p.size_bytes for p in parts] == sorted((p.size_bytes for p in parts), reverse=True)
