"""Bytecode for another CPU's image, compiled on the build machine (images/cross/compile_layer.py): every module of a
layer gets a checked-hash .pyc written by the same CPython minor as the image's, or the script refuses; the native
stages of Dockerfile.cross run it after each layer's install, and it is an input of the arm64 cells only."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from buildscripts.build import buildx
from buildscripts.workspace import Workspace
from tests.unit.test_matrix import ROOT

SCRIPT = ROOT / "images" / "cross" / "compile_layer.py"
MINOR = "{}.{}".format(*sys.version_info[:2])


@pytest.fixture
def compile_layer(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script as a module, importable by name: its process pool pickles its functions by reference."""
    spec = importlib.util.spec_from_file_location("compile_layer", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "compile_layer", module)
    spec.loader.exec_module(module)
    return module


def site(tmp_path: Path) -> Path:
    root = tmp_path / "site-packages"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "sub" / "mod.py").write_text("def f():\n    return '\\d'\n")  # a SyntaxWarning, not an error
    (root / "pkg" / "py2.py").write_text("print 'python 2'\n")
    return root


def test_every_module_gets_a_checked_hash_pyc(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              compile_layer: ModuleType) -> None:
    root = site(tmp_path)
    assert compile_layer.main([str(root), MINOR]) == 0
    out = capsys.readouterr().out
    for source in (root / "pkg" / "__init__.py", root / "pkg" / "sub" / "mod.py"):
        pyc = Path(importlib.util.cache_from_source(str(source)))
        data = pyc.read_bytes()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == 0b11   # hash-based, checked at import
    assert not Path(importlib.util.cache_from_source(str(root / "pkg" / "py2.py"))).exists()
    assert "pkg/py2.py does not compile" in out and "2 modules compiled" in out
    # run again: what has its .pyc is left alone
    assert compile_layer.main([str(root), MINOR]) == 0
    assert "0 modules compiled" in capsys.readouterr().out


def test_another_python_minor_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         compile_layer: ModuleType) -> None:
    root = site(tmp_path)
    assert compile_layer.main([str(root), "3.99"]) == 1
    err = capsys.readouterr().err
    assert f"this python3 is {MINOR}, the image's is 3.99" in err and "bases:" in err
    assert not list(root.rglob("*.pyc"))
    assert compile_layer.main([str(root / "missing"), MINOR]) == 2


def test_each_native_install_compiles_its_layer_and_only_arm64_hashes_the_script() -> None:
    text = (ROOT / "images" / "Dockerfile.cross").read_text()
    stages = text.split("\nFROM ")
    for layer in ("torch", "sglang", "toolkit"):
        stage = next(s for s in stages if s.startswith(f"native AS native-{layer}\n"))
        install = stage.index(f"install-layer.sh {layer} ")
        assert stage.index("compile_layer.py \"/opt/venv/lib/python$PYTHON_VERSION/site-packages\"") > install
    recipe = buildx.Recipe.of(Workspace.at(ROOT))
    assert SCRIPT in recipe.cross
    assert "compile_layer" not in (ROOT / "images" / "Dockerfile").read_text()
