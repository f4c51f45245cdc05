"""kernel-smoke's parts without a GPU: the child source of every part launches its op inside `launch` (which waits
right after it) and compares the result with torch; and the real stage, run as processes against a stand-in for
torch and sgl_kernel that behave as CUDA does (an op with no kernel image for the GPU returns from its launch, its
error waits in the runtime's last-error slot that a synchronise does not read, and the next checked launch raises
it: as sgl_kernel's silu_and_mul did on an H100 with its sm_90 code pruned away), names the library, the op and the
arch, and is classified `kernel-image-missing`; a library that is not installed is SKIPPED."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import core, gpu_stages, smokeparts  # noqa: F401  gpu_stages registers kernel-smoke
from buildscripts.results import StageResult, Status
from buildscripts.verify import classify

H200 = {"arch": "sm_90", "capability": "9.0", "name": "NVIDIA H200", "count": 1}

# What the children call of torch, nothing more; FAKE_CUDA picks what the op does:
# ok (it computes), no-image (its launch fails unchecked), silent (it returns and writes nothing), wrong.
FAKE_TORCH = '''
import math, os, types
MODE = os.environ.get("FAKE_CUDA", "ok")
bfloat16, float32 = "bfloat16", "float32"
_pending = []
class AcceleratorError(RuntimeError):
    pass
def _check():  # what torch does after each of its own launches: read (and clear) the last error
    if _pending:
        _pending.clear()
        raise AcceleratorError("CUDA error: no kernel image is available for execution on the device\\n"
                               "Search for `cudaErrorNoKernelImageForDevice' in the CUDA documentation.")
class Tensor:  # one value stands for every element
    def __init__(self, value):
        self.value = float(value)
    def _new(self, value):
        _check()
        return Tensor(value)
    def __getitem__(self, key):
        return self
    def float(self):
        return self._new(self.value)
    double = float
    def add_(self, other):
        _check()
        self.value += other
        return self
    def __sub__(self, other):
        return self._new(self.value - other.value)
    def __mul__(self, other):
        return self._new(self.value * (other.value if isinstance(other, Tensor) else other))
    __rmul__ = __mul__
    def __truediv__(self, other):
        return self.value / other
    def norm(self):
        return abs(self.value)
class cuda:
    @staticmethod
    def synchronize():  # waits for the GPU; the last-error slot is not its business
        pass
def _made(value):
    _check()
    return Tensor(value)
def randn(*shape, **kw):
    return _made(0.5)
def ones(*shape, **kw):
    return _made(1.0)
def full(shape, value, **kw):
    return _made(value)
def isnan(t):
    return types.SimpleNamespace(all=lambda: math.isnan(t.value))
def _silu(t):
    return Tensor(t.value / (1 + math.exp(-t.value)))
nn = types.SimpleNamespace(functional=types.SimpleNamespace(silu=_silu))
ops = types.SimpleNamespace()
'''

FAKE_SGL_KERNEL = '''
import math, types, torch
__version__ = "0.4.5"
def _silu_and_mul(out, x):
    if torch.MODE == "no-image":
        torch._pending.append("no kernel image")
    elif torch.MODE == "ok":
        out.value = x.value / (1 + math.exp(-x.value)) * x.value
    elif torch.MODE == "wrong":
        out.value = 0.0
torch.ops.sgl_kernel = types.SimpleNamespace(silu_and_mul=types.SimpleNamespace(default=_silu_and_mul))
'''


@pytest.fixture
def fake_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    for name, text in (("torch", FAKE_TORCH), ("sgl_kernel", FAKE_SGL_KERNEL)):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(text)
    info = site / "sglang_kernel-0.4.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.5\n")
    (info / "top_level.txt").write_text("sgl_kernel\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))   # the probe looks its libraries up in its own interpreter
    monkeypatch.setenv("SGLANG_IMAGES_FATBIN_REPORTS", str(tmp_path / "no-reports"))
    sgl_kernel = next(p for p in smokeparts.PARTS if p.key == "sgl_kernel")
    absent = smokeparts.Part("flashinfer", "no_such_module_flashinfer", ("flashinfer-python",), "norm.rmsnorm", "")
    monkeypatch.setattr(smokeparts, "PARTS", (sgl_kernel, absent))
    return tmp_path


def smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> dict[str, Any]:
    return smoke_with(tmp_path, monkeypatch, mode)[0]


def smoke_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               mode: str = "ok") -> tuple[dict[str, Any], core.Context]:
    """kernel-smoke's result, and the context it ran in (what it told the stages beside it)."""
    monkeypatch.setenv("FAKE_CUDA", mode)
    ctx = core.Context(archs=["sm_90a"], mode="host", workdir=str(tmp_path / "work"), stage_timeout=120)
    ctx.gpu = dict(H200)
    ctx.results["gpu-visible"] = {"name": "gpu-visible", "status": core.PASSED}
    return core.run_stage(ctx, core.REGISTRY["kernel-smoke"]), ctx


def labelled(result: dict[str, Any]) -> StageResult:
    return classify.label(StageResult(name="kernel-smoke", status=Status.FAILED, reason=result["reason"],
                                      log_excerpt=result.get("log_excerpt", "")))


def test_an_op_without_a_kernel_image_fails_there_with_the_library_the_op_and_the_drivers_words(
        fake_cuda: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = smoke(fake_cuda, monkeypatch, "no-image")
    assert result["status"] == core.FAILED
    record = result["evidence"]["sgl_kernel"]
    assert record["outcome"] == "failed" and record["op"] == "silu_and_mul"
    assert record["installed"] == "sglang-kernel 0.4.5"
    assert record["words"] == ("CUDA error: no kernel image is available for execution on the device "
                               "(cudaErrorNoKernelImageForDevice)")
    assert result["reason"].startswith("sgl_kernel: sgl_kernel op silu_and_mul failed on sm_90 (NVIDIA H200) at its "
                                       "launch or the wait right after it: AcceleratorError: CUDA error: no kernel "
                                       "image is available")
    stage = labelled(result)
    assert stage.failure_class == "kernel-image-missing"
    assert stage.hint and stage.hint.startswith("silu_and_mul of sgl_kernel has no kernel image for sm_90")
    assert "image whose target archs include sm_90" in stage.hint


def test_a_library_that_is_not_installed_is_skipped_with_the_reason_and_the_rest_passes(
        fake_cuda: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = smoke(fake_cuda, monkeypatch, "ok")
    assert result["status"] == core.PASSED, result.get("reason")
    skipped = result["evidence"]["flashinfer"]
    assert skipped["outcome"] == "skipped" and skipped["ok"] is None
    assert skipped["skipped"].startswith("flashinfer is not installed (no module no_such_module_flashinfer")
    ran = result["evidence"]["sgl_kernel"]
    assert ran["outcome"] == "passed" and ran["error_measure"] == 0.0 and ran["version"] == "0.4.5"


@pytest.mark.parametrize(("mode", "words"), [
    ("silent", "its output was never written, so its kernel did not run"),
    ("wrong", "error 1 > tolerance 0.01"),
])
def test_an_op_that_returns_without_a_right_result_fails_the_compare(
        fake_cuda: Path, monkeypatch: pytest.MonkeyPatch, mode: str, words: str) -> None:
    result = smoke(fake_cuda, monkeypatch, mode)
    assert result["status"] == core.FAILED
    assert "sgl_kernel op silu_and_mul computed a wrong result (compared with torch)" in result["reason"]
    assert words in result["reason"]
    assert labelled(result).failure_class == "kernel-wrong-result"


def test_a_deep_gemm_for_other_gpus_is_skipped_with_its_archs() -> None:
    deep_gemm = next(p for p in smokeparts.PARTS if p.key == "deep_gemm")
    why = smokeparts.skip_reason(deep_gemm, {"arch": "sm_120", "capability": "12.0"})
    assert why and why.startswith(("deep_gemm has no kernels for sm_120 (it has sm_90 and sm_100 only)",
                                   "deep_gemm is not installed"))


# ------------------------------------------------------------------------ the child source of every part

def calls(node: ast.AST) -> list[ast.Call]:
    """The calls under `node`, in the order they stand in the source."""
    return sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))


def dotted(func: ast.expr) -> str:
    """`a.b.c` of a call's function (`k[grid]` is `k`)."""
    if isinstance(func, ast.Subscript):
        return dotted(func.value)
    if isinstance(func, ast.Attribute):
        return f"{dotted(func.value)}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


@pytest.mark.parametrize("part", smokeparts.PARTS, ids=lambda p: p.key)
def test_each_part_launches_its_op_through_launch_then_compares_with_torch(part: smokeparts.Part) -> None:
    compile(smokeparts.source(part, H200), f"part-{part.key}.py", "exec")   # the whole child is Python
    body = ast.parse(part.body)
    launches = [c for c in calls(body) if dotted(c.func) == "launch"]
    assert len(launches) == 1
    inside = {id(c) for c in calls(launches[0])}
    op = part.op.split(".")[-1]
    op_calls = [c for c in calls(body) if op in dotted(c.func).split(".")]
    assert op_calls and all(id(c) in inside for c in op_calls), f"{part.key} calls {op} outside launch()"
    compares = [c for c in calls(body) if dotted(c.func) == "compare"]
    assert len(compares) == 1 and compares[0].lineno > launches[0].lineno


def test_launch_waits_right_after_the_op_with_a_checked_torch_launch() -> None:
    tree = ast.parse(smokeparts.PRELUDE)
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    settle = [dotted(c.func) for c in calls(funcs["settle"])]
    assert settle[0] == "torch.cuda.synchronize" and settle[-1] == "torch.cuda.synchronize"
    assert any(name.startswith("torch.") and name != "torch.cuda.synchronize" for name in settle[1:-1])
    tries = [n for n in ast.walk(funcs["launch"]) if isinstance(n, ast.Try)]
    after = [dotted(c.func) for s in tries[1].body for c in calls(s)]
    assert after == ["call", "settle"]   # the op, then at once the wait, in the same try


# A check that loads a module from the image's baked caches and finds it must build it first (as FlashInfer's norm was
# rebuilt by kernel-smoke in an image by digest on an H100 test machine): the stand-in writes the module's library.
REBUILDS_NORM = '''
import os
os.makedirs(os.path.dirname(os.environ["FAKE_REBUILD"]), exist_ok=True)
open(os.environ["FAKE_REBUILD"], "wb").write(b"rebuilt")
''' + smokeparts.SGL_KERNEL


@pytest.fixture
def baked(fake_cuda: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An image's bake report claiming sm_90a, with one baked FlashInfer module; the checks of kernel-smoke are the
    sgl_kernel stand-in and a part that rebuilds that module's library when FAKE_REBUILD names it."""
    base = fake_cuda / "caches" / "flashinfer"
    norm = base / ".cache" / "flashinfer" / "0.6.14" / "90a" / "cached_ops" / "norm"
    norm.mkdir(parents=True)
    (norm / "norm.so").write_bytes(b"baked")
    report = fake_cuda / "warm.json"
    report.write_text(json.dumps({"archs": ["sm_90a"], "profiles": ["default"],
                                  "caches": {"FLASHINFER_WORKSPACE_BASE": str(base)}}))
    monkeypatch.setenv("SGLANG_IMAGES_WARM_REPORT", str(report))
    rebuilds = smokeparts.Part("flashinfer", "sgl_kernel", ("sglang-kernel",), "silu_and_mul", REBUILDS_NORM)
    monkeypatch.setattr(smokeparts, "PARTS", (smokeparts.PARTS[0], rebuilds))
    return fake_cuda, norm / "norm.so"     # the test's folder, the baked library


def test_a_check_that_compiles_into_the_baked_caches_is_a_warning_naming_the_library_and_the_module(
        baked: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, norm = baked
    monkeypatch.setenv("FAKE_REBUILD", str(norm))
    result, ctx = smoke_with(root, monkeypatch)
    assert result["status"] == core.PASSED, result.get("reason")
    evidence = result["evidence"]
    assert evidence["flashinfer"]["compiled_into_caches"] == [str(norm)]
    assert "compiled_into_caches" not in evidence["sgl_kernel"]
    assert evidence["warnings"] == [
        "the image claims baked kernel caches but kernel-smoke compiled into them: flashinfer: 1 file(s) (norm) "
        "(on sm_90, an arch the image claims baked)"]
    assert ctx.compiled_by_checks == {str(norm)}   # the server's watch beside leaves it to this warning


def test_a_check_on_an_arch_the_image_does_not_bake_is_a_record_not_a_warning(
        baked: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, norm = baked
    report = root / "warm.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), "archs": ["sm_100a", "sm_120a"]}))
    monkeypatch.setenv("FAKE_REBUILD", str(norm))
    result, _ = smoke_with(root, monkeypatch)
    assert result["status"] == core.PASSED
    assert "warnings" not in result["evidence"]
    assert result["evidence"]["cold_expected"].startswith("compiled into the caches on sm_90: the image bakes sm_100a, "
                                                          "sm_120a: flashinfer: 1 file(s) (norm)")


def test_checks_that_load_from_the_baked_caches_say_nothing_of_them(
        baked: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = baked
    monkeypatch.setenv("FAKE_REBUILD", str(root / "elsewhere" / "norm.so"))   # outside the caches
    result, ctx = smoke_with(root, monkeypatch)
    assert result["status"] == core.PASSED
    assert "warnings" not in result["evidence"] and "cold_expected" not in result["evidence"]
    assert all("compiled_into_caches" not in v for v in result["evidence"].values())
    assert ctx.compiled_by_checks == set()


def test_a_failed_kernel_smoke_still_names_what_its_checks_compiled_into_the_caches(
        baked: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The server beside leaves such files to kernel-smoke's record, failed or not: its warning is kept."""
    root, norm = baked
    monkeypatch.setenv("FAKE_REBUILD", str(norm))
    result = smoke(root, monkeypatch, "wrong")
    assert result["status"] == core.FAILED and "computed a wrong result" in result["reason"]
    assert result["evidence"]["flashinfer"]["compiled_into_caches"] == [str(norm)]
    assert result["evidence"]["warnings"][0].startswith(
        "the image claims baked kernel caches but kernel-smoke compiled into them: flashinfer: 1 file(s) (norm)")
