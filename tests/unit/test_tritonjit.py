"""Triton per arch: which ptxas it runs, what fails (or warns, for an arch only audited) and the fix it names."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import core, cpu_stages, cudatools, tritonjit  # noqa: F401  (cpu_stages registers jit-compile)
from buildscripts.verify import classify

BUNDLED = "/opt/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas"
TOOLKIT = "/usr/local/cuda/bin/ptxas"
UNKNOWN = ("PTXASError: PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n"
           "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'\n\n"
           f"Repro command: {BUNDLED} -lineinfo -v --gpu-name=sm_121a /tmp/x.ptx -o /tmp/x.ptx.o\n")


def line(cap: int, ok: bool, ptxas: str = BUNDLED, cuda: str = "12.8", override: str = "TRITON_PTXAS_PATH") -> str:
    fields: dict[str, Any] = {"triton": "3.5.1", "capability": cap, "ptxas": ptxas, "ptxas_cuda": cuda,
                              "override": override, "override_set": None, "bundled": ptxas == BUNDLED, "ok": ok,
                              "seconds": 0.1}
    fields.update({"cubin_bytes": 5400} if ok else {"error": UNKNOWN.replace("121", str(cap))})
    return tritonjit.PREFIX + json.dumps(fields)


def fake_triton(monkeypatch: pytest.MonkeyPatch, outputs: list[str], toolkit: str | None = TOOLKIT) -> list[Any]:
    """Each child compile prints the next of `outputs`; the calls (argv, env) are returned as they happen."""
    calls: list[Any] = []

    def sh(argv: list[str], timeout: float, env: dict[str, str] | None = None,
           cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        calls.append((argv, env or {}))
        return subprocess.CompletedProcess(argv, 0, stdout=outputs[len(calls) - 1])

    monkeypatch.setattr(tritonjit, "_installed", lambda: True)
    monkeypatch.setattr(core, "sh", sh)
    monkeypatch.setattr(tritonjit, "toolkit_ptxas", lambda env: toolkit)
    return calls


def ptx_dump_and(*lines: str) -> str:
    """What a child prints: Triton's PTX dump of a failed assemble, then the probe's lines."""
    return "\n".join([".version 8.7", ".target sm_121a", "please share the reproducer above", *lines])


def test_capabilities_are_what_gputarget_takes() -> None:
    assert [tritonjit.capability(a) for a in ("sm_90a", "sm_100f", "sm_103a", "sm_121a")] == [90, 100, 103, 121]


def test_a_target_the_bundled_ptxas_does_not_know_fails_naming_the_toolkit_ptxas_that_compiles_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = fake_triton(monkeypatch, [ptx_dump_and(line(90, True), line(121, False)),
                                      line(121, True, ptxas=TOOLKIT, cuda="13.0")])
    status, ev, failure = tritonjit.run(["sm_90a", "sm_121a"], [], cudatools.Deadline(60), str(tmp_path))
    assert status == "failed" and failure is not None
    reason = failure[0]
    assert reason.startswith(f"Triton 3.5.1 with its bundled ptxas (CUDA 12.8, {BUNDLED}) cannot compile for "
                             "sm_121a: ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'")
    assert reason.endswith(f"set TRITON_PTXAS_PATH={TOOLKIT} (the toolkit's ptxas, CUDA 13.0, compiles it)")
    assert ev["per_arch"] == {"sm_90a": "ok", "sm_121a": "failed"}
    assert ev["with_toolkit_ptxas"] == {"ptxas": TOOLKIT, "per_arch": {"sm_121a": "ok"}}
    assert calls[0][0][-1] == "90,121" and calls[1][0][-1] == "121"    # the retry compiles only what failed
    assert calls[1][1]["TRITON_PTXAS_PATH"] == TOOLKIT
    assert calls[0][1]["TRITON_CACHE_DIR"] != calls[1][1]["TRITON_CACHE_DIR"]   # each compile really compiles
    assert classify.classify(reason, "jit-compile").id == "triton-bundled-ptxas-sm12x"


def test_an_arch_only_audited_that_fails_is_a_warning_and_the_part_passes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_triton(monkeypatch, [line(90, True) + "\n" + line(103, False)], toolkit=None)
    status, ev, failure = tritonjit.run(["sm_90a"], ["sm_103a"], cudatools.Deadline(60), str(tmp_path))
    assert (status, failure) == ("ok", None)
    assert ev["warnings"] == [
        f"sm_103a is not a target arch; Triton 3.5.1 with its bundled ptxas (CUDA 12.8, {BUNDLED}) cannot compile "
        "for sm_103a: ptxas fatal   : Value 'sm_103a' is not defined for option 'gpu-name'; install a CUDA >= 12.9 "
        "ptxas and set TRITON_PTXAS_PATH to it, or use a newer Triton"]


def test_the_fix_names_the_variable_triton_reads_for_that_arch(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """Triton >= 3.6 assembles sm_100 and newer with ptxas-blackwell, set by TRITON_PTXAS_BLACKWELL_PATH."""
    blackwell = BUNDLED + "-blackwell"
    calls = fake_triton(monkeypatch, [
        line(121, False, ptxas=blackwell, cuda="12.8", override="TRITON_PTXAS_BLACKWELL_PATH"),
        line(121, False, ptxas=TOOLKIT, cuda="12.8", override="TRITON_PTXAS_BLACKWELL_PATH")])
    _status, _ev, failure = tritonjit.run(["sm_121a"], [], cudatools.Deadline(60), str(tmp_path))
    assert failure is not None
    assert calls[1][1]["TRITON_PTXAS_BLACKWELL_PATH"] == TOOLKIT
    assert failure[0].endswith(f"point TRITON_PTXAS_BLACKWELL_PATH at a ptxas of CUDA >= 12.9 (the toolkit's "
                               f"{TOOLKIT} does not compile it either), or use a newer Triton")


def test_the_fix_says_whether_the_toolkit_ptxas_was_tried() -> None:
    failed = {"ok": False, "ptxas": BUNDLED, "override": "TRITON_PTXAS_PATH"}
    assert tritonjit.fix("sm_121a", failed, None, None) == (
        "install a CUDA >= 12.9 ptxas and set TRITON_PTXAS_PATH to it, or use a newer Triton")
    assert tritonjit.fix("sm_121a", failed, None, TOOLKIT) == (
        f"set TRITON_PTXAS_PATH={TOOLKIT} (the toolkit's ptxas; not tried here), or use a newer Triton")
    assert "does not compile it either" in tritonjit.fix("sm_121a", {**failed, "ptxas": TOOLKIT}, None, TOOLKIT)
    assert "does not compile it either" in tritonjit.fix("sm_121a", failed, {"ok": False}, TOOLKIT)


def test_a_triton_that_does_not_import_fails_every_target_with_its_error(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    fake_triton(monkeypatch, [tritonjit.PREFIX + json.dumps({"error": "ImportError: libcuda.so.1: cannot open"})],
                toolkit=None)
    status, ev, failure = tritonjit.run(["sm_90a"], [], cudatools.Deadline(60), str(tmp_path))
    assert status == "failed" and failure is not None
    assert "Triton cannot compile for sm_90a: ImportError: libcuda.so.1: cannot open" in failure[0]
    assert ev["per_arch"] == {"sm_90a": "failed"}


def test_no_triton_is_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tritonjit, "_installed", lambda: False)
    assert tritonjit.run(["sm_90a"], [], cudatools.Deadline(60), str(tmp_path))[0] == "absent"


def test_without_a_cuda_home_the_jit_stage_still_reports_triton(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    part = ("failed", {"per_arch": {"sm_121a": "failed"}, "warnings": ["sm_103a is not a target arch; x"]},
            ("Triton 3.5.1 cannot compile for sm_121a: ptxas fatal", "the log"))
    monkeypatch.setattr(tritonjit, "run", lambda *args: part)
    monkeypatch.setattr(cudatools, "find_cuda_home", lambda env: (None, "no CUDA home"))
    result = core.run_stage(core.Context(archs=["sm_121a"], also_archs=["sm_103a"], workdir=str(tmp_path)),
                            core.REGISTRY["jit-compile"])
    assert result["status"] == core.FAILED
    assert result["reason"] == ("CUDA toolkit not discoverable: no CUDA home; nothing but Triton can be "
                                "JIT-compiled; triton: Triton 3.5.1 cannot compile for sm_121a: ptxas fatal")
    assert result["evidence"]["parts"]["triton"]["per_arch"] == {"sm_121a": "failed"}
    assert result["evidence"]["warnings"] == ["sm_103a is not a target arch; x"]
