"""The probe's one question to the image's torch (cudatools.TORCH_FACTS), asked of a stand-in torch in a real
interpreter: every stage's line, and a part that fails leaves the others' lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from buildscripts.probe import cudatools

TORCH = """
__version__ = "2.14.1+cu130"
class version:
    cuda = "13.0"
class _C:
    _GLIBCXX_USE_CXX11_ABI = True
    @staticmethod
    def _cuda_getArchFlags():
        {archs}
"""
CPP_EXTENSION = "CUDA_HOME = '/usr/local/cuda'\ndef include_paths():\n    return ['/t/include']\n"


def ask(tmp_path: Path, archs: str) -> dict[str, object]:
    torch = tmp_path / "torch"
    (torch / "utils").mkdir(parents=True)
    (torch / "__init__.py").write_text(TORCH.replace("{archs}", archs))
    (torch / "utils" / "__init__.py").write_text("")
    (torch / "utils" / "cpp_extension.py").write_text(CPP_EXTENSION)
    done = subprocess.run([sys.executable, "-c", cudatools.TORCH_FACTS], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stderr
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in done.stdout.splitlines() if ln.startswith("@@")}
    return {"out": done.stdout, **{tag: json.loads(text) for tag, text in lines.items()}}


def test_one_interpreter_answers_every_stage(tmp_path: Path) -> None:
    found = ask(tmp_path, "return 'sm_90 sm_100'")
    assert found["@@archs"] == {"flags": "sm_90 sm_100", "cuda": "13.0", "torch": "2.14.1+cu130"}
    assert found["@@torch"] == {"cuda": "13.0", "cuda_home": "/usr/local/cuda"}
    assert found["@@jit"] == {"include": ["/t/include"], "abi": 1, "lib": str(tmp_path / "torch" / "lib")}


@pytest.mark.parametrize("archs", ["raise RuntimeError('no CUDA in this build')"])
def test_a_part_that_fails_leaves_the_others(tmp_path: Path, archs: str) -> None:
    found = ask(tmp_path, archs)
    assert "@@archs" not in found and "RuntimeError: no CUDA in this build" in str(found["out"])
    assert found["@@torch"] == {"cuda": "13.0", "cuda_home": "/usr/local/cuda"} and "@@jit" in found
