"""What the CPU stages ask the image's torch is asked once per probe run (core.python_once: flavour, the arch audit,
the toolchain and the JIT stage read one interpreter's answer, a failed answer is asked again), and the per-arch
compiles of the toolchain and deep_gemm run side by side but are said in the order of the archs, up to the first
that fails, as before. No processes: the child interpreter and the compiler are fakes."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import core, cudatools, jitcompile, toolchain

FACTS = ('@@archs {"flags": "sm_90 sm_100 compute_120", "cuda": "13.0", "torch": "2.14.1"}\n'
         '@@torch {"cuda": "13.0", "cuda_home": "/usr/local/cuda"}\n'
         '@@jit {"include": ["/t/include"], "abi": 1, "lib": "/t/lib"}\n')


def fake_torch(monkeypatch: pytest.MonkeyPatch, returncode: int = 0) -> list[str]:
    asked: list[str] = []

    def answer(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
        asked.append(code)
        return subprocess.CompletedProcess([], returncode, stdout=FACTS if returncode == 0 else "ImportError: x")

    monkeypatch.setattr(core, "python_snippet", answer)
    return asked


def test_every_stage_reads_one_answer_of_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_torch(monkeypatch)
    ctx = core.Context(archs=["sm_90a"], lane_cuda="13.0", results={"import:torch": {"status": core.PASSED}})
    assert core.run_stage(ctx, core.REGISTRY["flavour"])["status"] == core.PASSED
    assert toolchain._torch_view(ctx, cudatools.Deadline(60), {}) == {"cuda": "13.0", "cuda_home": "/usr/local/cuda"}
    assert core.python_once(ctx, jitcompile.TORCH_FLAGS, 60).stdout == FACTS   # the JIT stage's torch extension
    assert asked == [cudatools.TORCH_FACTS]


def test_a_failed_answer_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_torch(monkeypatch, returncode=1)
    ctx = core.Context(archs=["sm_90a"], lane_cuda="13.0", results={"import:torch": {"status": core.PASSED}})
    assert core.run_stage(ctx, core.REGISTRY["flavour"])["status"] == core.FAILED
    assert toolchain._torch_view(ctx, cudatools.Deadline(60), {}) == {"error": "ImportError: x"}
    assert len(asked) == 2 and ctx.answers == {}


def test_archs_compile_side_by_side_and_are_said_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    both = threading.Barrier(2, timeout=10)   # fails unless two compiles run at once

    def compile_for(arch: str) -> str:
        if arch != "sm_121a":
            both.wait()
        return arch.upper()

    done = cudatools.each_arch(["sm_90a", "sm_100a", "sm_121a"], compile_for)
    assert list(done.items()) == [("sm_90a", "SM_90A"), ("sm_100a", "SM_100A"), ("sm_121a", "SM_121A")]


def test_deep_gemm_says_the_archs_up_to_the_first_that_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    include = tmp_path / "site" / "deep_gemm" / "include" / "deep_gemm"
    (include / "common").mkdir(parents=True)
    (include / "common" / "utils.cuh").write_text("")
    (tmp_path / "site" / "deep_gemm" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ran: list[str] = []

    def nvcc(argv: list[str], deadline: Any, cwd: str | None = None, env: Any = None) -> tuple[bool, float, str]:
        arch = next(a for a in argv if a.startswith("-arch="))[len("-arch="):]
        ran.append(arch)
        return arch != "sm_100a", 1.0, f"$ nvcc\n{'error: bad' if arch == 'sm_100a' else ''}"

    monkeypatch.setattr(cudatools, "run", nvcc)
    status, ev, failed = jitcompile._deep_gemm(["sm_90a", "sm_100a", "sm_121a"], cudatools.Deadline(60), "nvcc",
                                               str(tmp_path))
    assert sorted(ran) == ["sm_100a", "sm_121a", "sm_90a"]
    assert status == "failed" and failed and failed[0].startswith("deep_gemm headers do not compile for sm_100a")
    assert ev["per_arch"] == {"sm_90a": "ok", "sm_100a": "failed"}


def test_the_torch_extension_compiles_its_archs_on_every_core(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(jitcompile, "_installed", lambda module: True)
    monkeypatch.setattr(jitcompile, "_audit", lambda path, archs: dict.fromkeys(archs, "ok"))
    commands: list[list[str]] = []

    def nvcc(argv: list[str], deadline: Any, cwd: str | None = None, env: Any = None) -> tuple[bool, float, str]:
        commands.append(argv)
        return True, 1.0, ""

    monkeypatch.setattr(cudatools, "run", nvcc)
    answer = subprocess.CompletedProcess([], 0, stdout=FACTS)
    status, _ev, _ = jitcompile._torch_extension(["sm_90a", "sm_100a"], cudatools.Deadline(60), "nvcc", "/cuda",
                                                 str(tmp_path), lambda code, timeout: answer)
    assert status == "ok" and "--threads=2" in commands[0] and "-I/t/include" in commands[0]
