"""The JIT-compile stage: compile real kernels for every target arch without a GPU.

Three parts, each timed, each with its own evidence per arch:
- flashinfer: its own JIT builds one small module (silu_and_mul) with FLASHINFER_CUDA_ARCH_LIST set,
  in a fresh workspace (so it really compiles), and the built library is audited for each arch;
- deep_gemm: a translation unit using deep_gemm's bundled headers (CuTe/CUTLASS included) compiled
  to a cubin per arch, with the flags deep_gemm's JIT uses (C++20, -cubin);
- torch extension: a kernel using torch's C++ headers compiled for all archs and linked against
  torch's and CUDA's libraries, as torch.utils.cpp_extension would;
- triton: a Triton kernel compiled for each arch with the ptxas Triton runs (tritonjit.py).
Archs only audited (Context.also_archs) are compiled apart, so that one the toolkit cannot target leaves
the targets' results alone; what fails for them is a warning.
The parts, and deep_gemm's per-arch units, run side by side (each is its own compiler processes on its own
files): under QEMU emulation each is minutes of one core (benchmarks/arm64-results.md), and a GPU runner has
cores to spare. Each part's seconds are its own wall clock, shared cores included.
Nothing is injected: the compilers find CUDA the way the libraries do, so a missing CUDA home, a
missing host compiler or missing link names fail here exactly as they would at runtime.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import core, cudatools, fatbin, tritonjit
from .cudatools import Deadline

FLASHINFER_JIT = r"""
import json, time
t0 = time.time()
from flashinfer.jit.activation import gen_act_and_mul_module
spec = gen_act_and_mul_module("silu")
t1 = time.time()
spec.build(verbose=False)
print("@@jit " + json.dumps({"library": str(spec.get_library_path()), "import_s": round(t1 - t0, 2),
                             "build_s": round(time.time() - t1, 2)}))
"""
TORCH_FLAGS = r"""
import json, os, torch
from torch.utils import cpp_extension as ce
print("@@jit " + json.dumps({"include": ce.include_paths(), "abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
                             "lib": os.path.join(os.path.dirname(torch.__file__), "lib")}))
"""
TORCH_EXT_CU = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/util/BFloat16.h>
__global__ void scale_kernel(c10::BFloat16* x, float a, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = c10::BFloat16(static_cast<float>(x[i]) * a);
}
void scale(c10::BFloat16* x, float a, int64_t n) {
  scale_kernel<<<(n + 255) / 256, 256>>>(x, a, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
# deep_gemm's bundled headers (shared ones, plus the arch's own GEMM implementation when it has one)
# and a kernel of our own: the unit proves that headers, nvcc and the arch flags agree without pinning
# a kernel signature, which changes between deep_gemm releases (transpose_fp32 did from 0.1 to 0.2).
DEEP_GEMM_HEADERS = ("deep_gemm/common/utils.cuh", "deep_gemm/impls/smxx_layout.cuh")
DEEP_GEMM_KERNEL = "__global__ void probe_scale(float* x, float a) { x[threadIdx.x] *= a; }\n"
DEEP_GEMM_IMPLS = {9: "deep_gemm/impls/sm90_bf16_gemm.cuh", 10: "deep_gemm/impls/sm100_bf16_gemm.cuh",
                   12: "deep_gemm/impls/sm120_bf16_gemm.cuh"}

Part = Tuple[str, Dict[str, Any], Optional[Tuple[str, str]]]   # (status, evidence, (reason, log) if failed)


def run(ctx: core.Context) -> Dict[str, Any]:
    deadline = Deadline(ctx.stage_timeout)
    work = os.path.join(ctx.workdir, "jit")
    shutil.rmtree(work, ignore_errors=True)   # a fresh folder: every run really compiles
    os.makedirs(work, exist_ok=True)
    home, how = cudatools.find_cuda_home(dict(os.environ))
    jobs: Dict[str, Callable[[], Any]] = {  # Triton needs no CUDA home
        "triton": partial(tritonjit.run, ctx.archs, ctx.also_archs, deadline, work)}
    if home is not None:
        jobs["targets"] = partial(_parts, ctx.archs, deadline, home, work)
        if ctx.also_archs:  # compiled on their own: an arch only audited must not fail the targets' compile
            jobs["also"] = partial(_parts, ctx.also_archs, deadline, home, os.path.join(work, "also"))
    done = core.side_by_side(jobs)
    triton: Part = done["triton"]
    if home is None:
        msg = f"CUDA toolkit not discoverable: {how}; nothing but Triton can be JIT-compiled"
        if triton[2]:
            msg += f"; triton: {triton[2][0]}"
        raise core.StageFailed(msg, {"parts": {"triton": triton[1]}, "status": {"triton": triton[0]},
                                     "warnings": triton[1].get("warnings", [])}, triton[2][1] if triton[2] else "")
    parts = {**done["targets"], "triton": triton}
    ev: Dict[str, Any] = {"cuda_home": home, "parts": {n: p[1] for n, p in parts.items()},
                          "status": {n: p[0] for n, p in parts.items()},
                          "per_arch": {a: _arch_row(parts, a) for a in ctx.archs},
                          "warnings": list(triton[1].get("warnings", []))}
    if ctx.also_archs:
        also = done["also"]
        ev["also_audited"] = {n: p[1] for n, p in also.items()}
        for arch in ctx.also_archs:
            ev["per_arch"][arch] = {**_arch_row(also, arch), "triton": triton[1].get("per_arch", {}).get(arch)}
        which = ", ".join(ctx.also_archs)
        # A part that failed for the targets too has failed the stage already: only new news is a warning.
        ev["warnings"] += [f"not a target arch ({which}): {name}: {p[2][0]}" for name, p in also.items()
                           if p[2] and parts[name][2] is None]
    failed = [(n, p[2]) for n, p in parts.items() if p[2] is not None]
    if failed:
        name, (reason, log) = failed[0]
        msg = f"{name}: {reason}"
        raise core.StageFailed(msg, ev, log)
    if all(p[0] == "absent" for p in parts.values()):
        msg = "none of flashinfer, deep_gemm, torch or triton is installed"
        raise core.StageSkipped(msg)
    return ev


def _parts(archs: List[str], deadline: Deadline, home: str, work: str) -> Dict[str, Part]:
    """The compiles that need a CUDA home, for `archs`, in `work`."""
    os.makedirs(work, exist_ok=True)
    nvcc = os.path.join(home, "bin", "nvcc")
    return core.side_by_side({"flashinfer": partial(_part, _flashinfer, archs, deadline, work),
                              "deep_gemm": partial(_part, _deep_gemm, archs, deadline, nvcc, work),
                              "torch-extension": partial(_part, _torch_extension, archs, deadline, nvcc, home, work)})


def _part(compile_part: Callable[..., Part], *args: Any) -> Part:
    """One part's outcome; a command of it that ran out of time fails that part (with the others' evidence kept,
    and for an audited arch only a warning), not the whole stage."""
    try:
        return compile_part(*args)
    except core.StageFailed as exc:
        return "failed", {"error": exc.reason}, (exc.reason, exc.log)


def _arch_row(parts: Dict[str, Part], arch: str) -> Dict[str, Any]:
    """One arch's outcome per part: its own, else the part's (absent, or failed before any arch)."""
    return {n: p[1].get("per_arch", {}).get(arch, p[0]) for n, p in parts.items()}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _audit(path: str, archs: List[str]) -> Dict[str, str]:
    cover = fatbin.coverage(fatbin.read_file(path), archs)
    return {a: "ok" if c["status"] == "sass" else f"no sm code ({c['status']})" for a, c in cover.items()}


def _flashinfer(archs: List[str], deadline: Deadline, work: str) -> Part:
    if not _installed("flashinfer"):
        return "absent", {"note": "flashinfer is not installed"}, None
    env = {"FLASHINFER_CUDA_ARCH_LIST": " ".join(cudatools.flashinfer_arch(a) for a in archs),
           "FLASHINFER_WORKSPACE_BASE": os.path.join(work, "flashinfer"),
           "MAX_JOBS": str(os.cpu_count() or 1)}
    proc = core.python_snippet(FLASHINFER_JIT, timeout=deadline.left(), env=env)
    ev: Dict[str, Any] = {"module": "silu_and_mul", "env": env}
    out = proc.stdout or ""
    line = next((ln for ln in out.splitlines() if ln.startswith("@@jit ")), None)
    if proc.returncode != 0 or line is None:
        return "failed", ev, (f"JIT of silu_and_mul failed: {cudatools.error_line(out)}", out)
    ev.update(json.loads(line[len("@@jit "):]))
    ev["seconds"] = ev.get("build_s")
    return _checked(ev, _audit(ev["library"], archs), "flashinfer's JIT library", out)


def _checked(ev: Dict[str, Any], per_arch: Dict[str, str], what: str, log: str) -> Part:
    ev["per_arch"] = per_arch
    lacking = [a for a, s in per_arch.items() if s != "ok"]
    if lacking:
        return "failed", ev, (f"{what} has no code for {', '.join(lacking)}", log)
    return "ok", ev, None


def _deep_gemm(archs: List[str], deadline: Deadline, nvcc: str, work: str) -> Part:
    spec = importlib.util.find_spec("deep_gemm") if _installed("deep_gemm") else None
    roots = list(spec.submodule_search_locations or []) if spec else []
    include = next((os.path.join(r, "include") for r in roots if os.path.isdir(os.path.join(r, "include"))),
                   None)
    if include is None:
        return "absent", {"note": "deep_gemm (with bundled headers) is not installed"}, None
    shared = [h for h in DEEP_GEMM_HEADERS if os.path.exists(os.path.join(include, h))]
    if not shared:
        return "failed", {"include": include}, (f"none of {', '.join(DEEP_GEMM_HEADERS)} under {include}", "")
    ev: Dict[str, Any] = {"include": include, "headers": {}, "per_arch": {}, "seconds": {}}
    units: Dict[str, Callable[[], Tuple[bool, float, str]]] = {}
    for arch in archs:
        number, _ = fatbin.parse_arch(arch)
        impl = DEEP_GEMM_IMPLS.get(number // 10)
        headers = shared + ([impl] if impl and os.path.exists(os.path.join(include, impl)) else [])
        ev["headers"][arch] = headers
        source = "".join(f"#include <{h}>\n" for h in headers) + DEEP_GEMM_KERNEL
        name = f"deep_gemm_{arch}"
        with open(os.path.join(work, name + ".cu"), "w") as fh:
            fh.write(source)
        units[arch] = partial(cudatools.run, [
            nvcc, "-std=c++20", "-O3", "--expt-relaxed-constexpr", "--expt-extended-lambda", "-cubin",
            f"-arch={arch}", f"-I{include}", name + ".cu", "-o", name + ".cubin"], deadline, cwd=work)
    # one unit per core at a time: each cicc holds CuTe's templates in memory
    compiled = core.side_by_side(units, most=os.cpu_count() or 1)
    for arch, (ok, took, _log) in compiled.items():
        ev["per_arch"][arch] = "ok" if ok else "failed"
        ev["seconds"][arch] = took
    failed = [(arch, log) for arch, (ok, _took, log) in compiled.items() if not ok]
    if failed:
        arch, log = failed[0]
        return "failed", ev, (f"deep_gemm headers do not compile for {arch}: {cudatools.error_line(log)}", log)
    return "ok", ev, None


def _torch_extension(archs: List[str], deadline: Deadline, nvcc: str, home: str, work: str) -> Part:
    if not _installed("torch"):
        return "absent", {"note": "torch is not installed"}, None
    proc = core.python_snippet(TORCH_FLAGS, timeout=deadline.capped(120.0))
    out = proc.stdout or ""
    line = next((ln for ln in out.splitlines() if ln.startswith("@@jit ")), None)
    if line is None:
        return "failed", {}, (f"torch does not import: {cudatools.error_line(out)}", out)
    flags = json.loads(line[len("@@jit "):])
    with open(os.path.join(work, "torch_ext.cu"), "w") as fh:
        fh.write(TORCH_EXT_CU)
    gencodes = [g for a in archs for g in cudatools.gencode(a)]
    includes = [f"-I{p}" for p in flags["include"]]
    ok, took, log = cudatools.run(
        [nvcc, "-c", "torch_ext.cu", "-o", "torch_ext.o", "-std=c++17", "-Xcompiler", "-fPIC",
         f"-D_GLIBCXX_USE_CXX11_ABI={flags['abi']}", *includes, *gencodes], deadline, cwd=work)
    ev: Dict[str, Any] = {"compile_s": took}
    if not ok:
        return "failed", ev, (f"compile failed: {cudatools.error_line(log)}", log)
    ok, took, link_log = cudatools.run(
        [cudatools.host_compiler(dict(os.environ)) or "c++", "-shared", "torch_ext.o", "-o", "torch_ext.so",
         f"-L{flags['lib']}", "-lc10", "-lc10_cuda",
         *cudatools.link_dirs(home), "-lcudart"], deadline, cwd=work)
    ev["link_s"] = took
    ev["seconds"] = round(ev["compile_s"] + took, 2)
    if not ok:
        return "failed", ev, (f"link failed: {cudatools.error_line(link_log)}", link_log)
    return _checked(ev, _audit(os.path.join(work, "torch_ext.o"), archs), "the torch extension", log)
