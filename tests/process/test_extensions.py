"""The verifier's judgement of a compiled extension that does not load (buildscripts/probe/extensions.py), on
real shared libraries the system loader refuses for a missing torch symbol, in a site folder made here: a
package that goes on without its extension (as torchao 0.9 does) is a warning, unless SGLang calls its ops;
a package that cannot import without it fails."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from buildscripts.probe import extensions, reviewed
from tests import needs

SYMBOL = "_ZN5torch7LibraryC1ENS0_4KindESsSt8optionalIN3c1011DispatchKeyEEPKcj"
EXTENSION_C = f'extern int torch_library __asm__("{SYMBOL}");\nint *needs_torch = &torch_library;\n'
OPTIONAL = """import ctypes, os
try:
    ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_C.so"))
except OSError:
    pass   # like torchao: go on without the compiled ops
"""
REQUIRED = 'import ctypes, os\nctypes.CDLL(os.path.join(os.path.dirname(__file__), "_C.so"))\n'


def site_with(tmp_path: Path, init: str, caller: str = "") -> tuple[Path, Path]:
    """A site folder holding package `fakeext` 1.2 (its `_C.so` needs SYMBOL) and, when given, an `sglang`
    module with `caller` as its code: (site, the extension)."""
    gcc = needs.tool("gcc", ".ci/install-engine installs gcc")
    site = tmp_path / "site"
    package = site / "fakeext"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(init)
    (package / "ext.c").write_text(EXTENSION_C)
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(package / "_C.so"), str(package / "ext.c")], check=True)
    info = site / "fakeext-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeext\nVersion: 1.2\n")
    (info / "top_level.txt").write_text("fakeext\n")
    if caller:
        (site / "sglang").mkdir()
        (site / "sglang" / "quant.py").write_text(caller)
    return site, package / "_C.so"


def load_error(path: Path) -> str:
    with pytest.raises(OSError) as refused:
        ctypes.CDLL(str(path))
    return str(refused.value)


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The made site is importable by the fresh interpreters the judgement starts, and by this one."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_a_reviewed_optional_extension_built_against_another_torch_is_a_warning(
        tmp_path: Path, on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reviewed.REVIEWED, ("fakeext", "1.2"), "read: SGLang reaches none of its ops")
    site, lib = site_with(tmp_path, OPTIONAL, caller="def f(x):\n    return x\n")
    finding = extensions.judge(str(lib), load_error(lib), str(site), timeout=60)
    assert finding is not None and finding["fatal"] is False
    assert finding["package"] == "fakeext 1.2" and finding["symbol"] == SYMBOL
    assert finding["package_imports_without_it"] is True and finding["caller_uses_its_ops"] == []
    assert finding["summary"].startswith("torch extension ABI mismatch: fakeext/_C.so (fakeext 1.2) does not load")
    assert "fakeext imports without it" in finding["summary"] and "sglang calls none" in finding["summary"]
    assert "the review says: read: SGLang reaches none of its ops" in finding["summary"]


def test_an_optional_extension_nobody_reviewed_fails(tmp_path: Path, on_path: None) -> None:
    site, lib = site_with(tmp_path, OPTIONAL, caller="def f(x):\n    return x\n")
    finding = extensions.judge(str(lib), load_error(lib), str(site), timeout=60)
    assert finding is not None and finding["fatal"] is True and finding["reviewed"] is None
    assert "was never reviewed for fakeext 1.2" in finding["summary"]


def test_without_sglang_beside_it_nothing_can_be_waved_through(
        tmp_path: Path, on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reviewed.REVIEWED, ("fakeext", "1.2"), "reviewed")
    site, lib = site_with(tmp_path, OPTIONAL)
    finding = extensions.judge(str(lib), load_error(lib), str(site), timeout=60)
    assert finding is not None and finding["fatal"] is True and finding["caller_uses_its_ops"] is None
    assert "sglang is not installed beside it" in finding["summary"]


def test_ops_in_another_namespace_or_a_parenthesised_import_are_found(tmp_path: Path, on_path: None) -> None:
    site, _lib = site_with(tmp_path, OPTIONAL + 'import torch\nlib = torch.library.Library("_fake_C", "DEF")\n',
                           caller="from fakeext import (\n    layouts,\n    ops,\n)\n")
    (site / "sglang" / "other.py").write_text("import torch\nx = torch.ops._fake_C.gemm\n")
    assert extensions.namespaces("fakeext", str(site)) == ["_fake_C", "fakeext"]
    assert extensions.callers_of("fakeext", str(site)) == ["sglang/other.py", "sglang/quant.py"]


def test_an_optional_extension_whose_ops_sglang_calls_fails(tmp_path: Path, on_path: None) -> None:
    site, lib = site_with(tmp_path, OPTIONAL, caller="import torch\ny = torch.ops.fakeext.gemm\n")
    finding = extensions.judge(str(lib), load_error(lib), str(site), timeout=60)
    assert finding is not None and finding["fatal"] is True
    assert finding["caller_uses_its_ops"] == ["sglang/quant.py"]
    assert "but sglang calls its compiled ops directly in sglang/quant.py" in finding["summary"]


def test_an_extension_its_package_cannot_import_without_fails(tmp_path: Path, on_path: None) -> None:
    site, lib = site_with(tmp_path, REQUIRED)
    finding = extensions.judge(str(lib), load_error(lib), str(site), timeout=60)
    assert finding is not None and finding["fatal"] is True
    assert "fakeext does not import without it" in finding["summary"]


def test_another_cause_is_not_called_a_torch_mismatch(tmp_path: Path) -> None:
    error = "/x/_C.so: undefined symbol: cublasLtMatmul"
    assert extensions.judge("/x/_C.so", error, str(tmp_path), timeout=60) is None


def test_the_old_string_abi_is_told_from_the_new() -> None:
    assert extensions.OLD_STRING_ABI.search(SYMBOL)
    assert not extensions.OLD_STRING_ABI.search("_ZN3c1010TensorImpl4sizeEv")
