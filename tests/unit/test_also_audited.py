"""Archs audited and compiled for without being targets (sm_103a for B300, sm_121a for GB10): from
matrix.yaml to the probe's command line, what each stage says of them, and that they never fail a cell."""

from __future__ import annotations

import importlib.machinery
import subprocess
from pathlib import Path
from typing import Any

import pytest

from buildscripts import matrix
from buildscripts.matrix import Cell
from buildscripts.matrix.schema import Profile
from buildscripts.probe import core, cpu_stages, cudatools, jitcompile, pruned, tritonjit
from buildscripts.verify import plan, provision, reuse
from buildscripts.verify.asked import Asked
from buildscripts.verify.gpus import Discovery
from buildscripts.workspace import Workspace
from tests.unit.test_fatbin import ARCH_SPECIFIC, elf_with_sections, entry, fatbin_blob
from tests.unit.test_matrix import ROOT, edited, error_of, parse


def test_the_default_matrix_audits_b300_beside_its_amd64_targets() -> None:
    """GB10 (sm_121a) is arm64 only: amd64 images audit B300 (sm_103a) alone (docs/platforms.md)."""
    default = matrix.load(ROOT / "matrix.yaml", {})
    assert default.spec.targets("linux/amd64").archs == ("sm_90a", "sm_100a", "sm_120a")
    assert default.spec.targets("linux/amd64").also_audit == ("sm_103a",)
    cell = default.buildable()[0]
    assert cell.also_audit == ("sm_103a",)
    assert "sm_103a" not in cell.axes()["archs"]   # not an input of the image: no rebuild, no tag changes


def amd64_audits(archs: list[str]) -> str:
    return edited({"platforms": {"linux/amd64": {"archs": ["sm_90a", "sm_100a", "sm_120a"], "also_audit": archs},
                                 "linux/arm64": {"archs": ["sm_90a"]}}})


def test_an_audited_arch_must_be_an_arch_and_not_a_target() -> None:
    assert "is a target arch already" in error_of(amd64_audits(["sm_100a"]))
    assert "not a known GPU target" in error_of(amd64_audits(["sm_104a"]))
    assert parse(amd64_audits([])).spec.targets("linux/amd64").also_audit == ()


def test_the_plan_passes_them_to_the_probe_and_into_the_reuse_key() -> None:
    loaded = matrix.load(ROOT / "matrix.yaml", {})
    cell = loaded.buildable()[0]

    def for_cell(cell: Cell) -> plan.Plan:
        return provision.plan(Asked(ws=Workspace.at(ROOT), matrix=loaded), Profile(), cell=cell)

    planned = for_cell(cell)
    args = planned.probe_args("container")
    assert args[args.index("--also-archs") + 1] == "sm_103a"
    bare = plan.Plan.make(archs=["sm_90a"], lane_cuda=None, also_archs=["sm_90a", "sm_121a", "sm_121a"])
    assert bare.also_archs == ("sm_121a",)   # a target is not audited twice
    assert "--also-archs" not in plan.Plan.make(archs=["sm_90a"], lane_cuda=None).probe_args("host")
    nogpu = Discovery(problem="no GPU")
    assert reuse.key("sha256:x", planned, nogpu) != reuse.key(
        "sha256:x", for_cell(cell.__class__(**{**cell.__dict__, "also_audit": ()})), nogpu)


def test_the_probe_reads_them_from_its_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from buildscripts.probe import __main__ as probe_main
    seen: dict[str, Any] = {}

    def record(ctx: core.Context, names: list[str], out: str | None) -> list[dict[str, Any]]:
        seen.update(archs=ctx.archs, also=ctx.also_archs, every=ctx.every_arch())
        return []

    monkeypatch.setattr(core, "run_all", record)
    probe_main.main(["--archs", "sm_90a,sm_120a", "--also-archs", "sm_120a,sm_121a", "--stages", "facts"])
    assert seen == {"archs": ["sm_90a", "sm_120a"], "also": ["sm_121a"], "every": ["sm_90a", "sm_120a", "sm_121a"]}


def test_torch_arch_flags_cover_the_newer_minor_of_their_family() -> None:
    flags = ["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"]
    assert cpu_stages.torch_covers(flags, "sm_103a") and cpu_stages.torch_covers(flags, "sm_121a")
    assert not cpu_stages.torch_covers(["sm_90", "sm_100a"], "sm_103a")   # `a` code runs on its arch only
    assert cpu_stages.torch_covers(["sm_90", "compute_90"], "sm_121a")    # PTX compiles forward
    assert not cpu_stages.torch_covers(["sm_90"], "sm_120a")


def audited_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty package `kernels` that the arch audit scans alone (its library written by the caller)."""
    package = tmp_path / "kernels"
    package.mkdir()
    spec = importlib.machinery.ModuleSpec("kernels", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(cpu_stages, "LIBRARIES", ("kernels",))
    monkeypatch.setattr("buildscripts.probe.cpu_stages.util.find_spec",
                        lambda name: spec if name == "kernels" else None)
    monkeypatch.setattr(pruned, "libraries", dict)
    return package


@pytest.fixture
def one_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `kernels` whose library has sm_90a and sm_120a machine code, nothing for sm_121a."""
    package = audited_alone(tmp_path, monkeypatch)
    blob = fatbin_blob(entry(2, 90, 0x11 | ARCH_SPECIFIC), entry(2, 120, 0x11 | ARCH_SPECIFIC))
    (package / "ops.so").write_bytes(elf_with_sections({".nv_fatbin": blob}))
    return package


def audit(archs: list[str], also: list[str]) -> dict[str, Any]:
    ctx = core.Context(archs=archs, also_archs=also, results={"import:torch": {"status": core.FAILED}})
    return core.run_stage(ctx, core.REGISTRY["arch-audit"])


def test_an_audited_arch_without_code_is_a_warning_and_the_audit_passes(one_library: Path) -> None:
    result = audit(["sm_90a", "sm_120a"], ["sm_121a"])
    assert result["status"] == core.PASSED
    ev = result["evidence"]
    assert ev["libraries"]["kernels"]["per_arch"] == {"sm_90a": "sass", "sm_120a": "sass", "sm_121a": "missing"}
    assert ev["warnings"] == ["sm_121a is not a target arch; no code it can run in kernels (it has sm_90a, sm_120a; "
                              "sm_120a is arch-specific and runs on its own arch alone)"]
    assert (ev["targets"], ev["also_audited"]) == (["sm_90a", "sm_120a"], ["sm_121a"])


def test_code_the_pruner_took_from_an_audited_arch_is_said(one_library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = str(one_library.parent)
    rewritten = {f"{site}/nvidia/lib/libcublasLt.so.13": {"site": site, "dropped": {"sm_121": 10, "sm_80": 5}},
                 f"{site}/kernels/ops.so": {"site": site, "dropped": {"sm_103a": 7}}}
    monkeypatch.setattr(pruned, "libraries", lambda: rewritten)
    monkeypatch.setattr(pruned, "dlopen_snippet", lambda paths: "")
    monkeypatch.setattr(core, "python_snippet", lambda code, timeout: subprocess.CompletedProcess(
        [], 0, stdout='@@pruned-load {"failed": {}}'))
    warned = audit(["sm_90a", "sm_120a"], ["sm_103a", "sm_121a"])["evidence"]["warnings"]
    assert ("sm_121a is not a target arch; the image's fatbin pruner removed its machine code from 1 library "
            "(nvidia/lib/libcublasLt.so.13): it keeps only what the targets run") in warned
    assert any(w.startswith("sm_103a is not a target arch; the image's fatbin pruner removed its machine code from "
                            "1 library (kernels/ops.so)") for w in warned)


def test_the_same_arch_as_a_target_fails_the_audit(one_library: Path) -> None:
    result = audit(["sm_90a", "sm_121a"], [])
    assert result["status"] == core.FAILED
    assert result["reason"].startswith("kernels has no code for sm_121a (it has sm_90a, sm_120a;")


def test_nvcc_too_old_for_an_audited_arch_is_a_warning_of_the_toolchain(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setattr(cudatools, "run", lambda argv, deadline, cwd=None, env=None: (
        True, 0.1, "Cuda compilation tools, release 12.8, V12.8.93" if argv[-1] == "--version" else ""))
    ctx = core.Context(archs=["sm_120a"], also_archs=["sm_121a"], workdir=str(tmp_path),
                       results={"import:torch": {"status": core.FAILED}})
    result = core.run_stage(ctx, core.REGISTRY["toolchain"])
    ev = result["evidence"]
    assert ev["nvcc"]["knows"] == {"sm_120a": True, "sm_121a": False}
    assert "sm_121a is not a target arch; nvcc 12.8 is too old for sm_121a (needs CUDA >= 12.9)" in ev["warnings"]
    assert "sm_121a" not in (result.get("reason") or "")   # it fails for its headers here, not for sm_121a


def test_jit_compiles_audited_archs_apart_and_warns_for_what_fails(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    compiled: list[list[str]] = []

    def parts(archs: list[str], deadline: Any, home: str, work: str) -> dict[str, Any]:
        compiled.append(archs)
        if "sm_121a" in archs:
            return {"flashinfer": ("failed", {"per_arch": {}}, ("RuntimeError: SM 12.x requires CUDA >= 12.9", "")),
                    "deep_gemm": ("ok", {"per_arch": {"sm_121a": "ok"}}, None)}
        return {"flashinfer": ("ok", {"per_arch": {a: "ok" for a in archs}}, None),
                "deep_gemm": ("ok", {"per_arch": {a: "ok" for a in archs}}, None)}

    monkeypatch.setattr(jitcompile, "_parts", parts)
    monkeypatch.setattr(tritonjit, "run", lambda targets, also, deadline, work: (
        "ok", {"per_arch": {a: "ok" for a in [*targets, *also]}}, None))
    monkeypatch.setattr(cudatools, "find_cuda_home", lambda env: ("/usr/local/cuda", "$CUDA_HOME"))
    ctx = core.Context(archs=["sm_90a", "sm_120a"], also_archs=["sm_121a"], workdir=str(tmp_path))
    result = core.run_stage(ctx, core.REGISTRY["jit-compile"])
    assert result["status"] == core.PASSED
    assert sorted(compiled) == [["sm_121a"], ["sm_90a", "sm_120a"]]   # targets and audited apart, side by side
    ev = result["evidence"]
    assert ev["per_arch"]["sm_120a"] == {"flashinfer": "ok", "deep_gemm": "ok", "triton": "ok"}
    assert ev["per_arch"]["sm_121a"] == {"flashinfer": "failed", "deep_gemm": "ok", "triton": "ok"}
    assert ev["warnings"] == ["not a target arch (sm_121a): flashinfer: RuntimeError: SM 12.x requires CUDA >= 12.9"]


def test_a_part_that_runs_out_of_time_fails_that_part_and_for_an_audited_arch_only_warns(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def flashinfer(archs: list[str], deadline: Any, work: str) -> Any:
        if "sm_121a" in archs:
            raise core.StageFailed("timed out after 120s: python3 -c ...", log="(partial output)")
        return "ok", {"per_arch": {a: "ok" for a in archs}}, None

    ok: tuple[str, dict[str, Any], None] = ("ok", {"per_arch": {}}, None)
    monkeypatch.setattr(jitcompile, "_flashinfer", flashinfer)
    monkeypatch.setattr(jitcompile, "_deep_gemm", lambda archs, deadline, nvcc, work: ok)
    monkeypatch.setattr(jitcompile, "_torch_extension", lambda archs, deadline, nvcc, home, work: ok)
    monkeypatch.setattr(tritonjit, "run", lambda targets, also, deadline, work: ok)
    monkeypatch.setattr(cudatools, "find_cuda_home", lambda env: ("/usr/local/cuda", "$CUDA_HOME"))
    ctx = core.Context(archs=["sm_90a"], also_archs=["sm_121a"], workdir=str(tmp_path))
    result = core.run_stage(ctx, core.REGISTRY["jit-compile"])
    assert result["status"] == core.PASSED
    assert result["evidence"]["warnings"] == [
        "not a target arch (sm_121a): flashinfer: timed out after 120s: python3 -c ..."]
    assert result["evidence"]["also_audited"]["flashinfer"] == {"error": "timed out after 120s: python3 -c ..."}
    # the same for a target arch fails the stage, naming the part
    ctx = core.Context(archs=["sm_121a"], workdir=str(tmp_path))
    result = core.run_stage(ctx, core.REGISTRY["jit-compile"])
    assert result["status"] == core.FAILED and result["reason"].startswith("flashinfer: timed out after 120s")


def test_a_steps_own_limit_stretches_with_the_stage_deadline() -> None:
    assert cudatools.Deadline(900).capped(120.0) == pytest.approx(120.0, abs=0.5)
    assert cudatools.Deadline(3600).capped(120.0) == pytest.approx(480.0, abs=0.5)   # emulation's deadline
    assert cudatools.Deadline(60).capped(120.0) <= 60.0                              # never past the stage
