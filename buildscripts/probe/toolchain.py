"""The toolchain stage: is there a CUDA toolkit that the JIT compilers of this image can use?

Checks, in the order a JIT compile needs them: CUDA home found the way the libraries look for it;
nvcc runs and is new enough for every target arch; torch's CUDA major matches nvcc's; headers
(cuda_runtime.h, cuda/std); a host compiler; ninja; then a real smoke compile per arch (which
catches component skew such as `Unsupported .version`) and a link with -lcudart -lcuda.
The first problem found is the stage's reason; all of them are in the evidence.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from typing import Any, Dict, List, Optional, Tuple

from . import core, cudatools, loaderfacts
from .cudatools import Deadline

SMOKE_CU = r"""
#include <cuda_runtime.h>
#include <cuda/std/cstdint>
__global__ void probe_kernel(cuda::std::uint32_t* x) { x[threadIdx.x] += 1u; }
extern "C" int probe_launch(cuda::std::uint32_t* x) {
  probe_kernel<<<1, 32>>>(x);
  return static_cast<int>(cudaGetLastError());
}
"""

TORCH_CUDA = ("import json, torch; from torch.utils import cpp_extension as ce; "
              "print('@@torch ' + json.dumps({'cuda': torch.version.cuda, 'cuda_home': ce.CUDA_HOME}))")
TOOLKIT_WHEELS = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime",
                  "nvidia-cuda-cccl", "nvidia-cuda-nvrtc", "cuda-toolkit")


def run(ctx: core.Context) -> Dict[str, Any]:
    """Every check, in the order a JIT compile needs them; the first problem found is the stage's reason."""
    deadline = Deadline(ctx.stage_timeout)
    env = dict(os.environ)
    problems: List[Tuple[str, str]] = []   # (reason, log), first one fails the stage
    ev: Dict[str, Any] = {"versions": {}}
    home = _cuda_home(ctx, deadline, env, ev)
    if os.pathsep in home:
        problems.append((f"CUDA_HOME contains a path separator: {home!r}", ""))
    nvcc = os.path.join(home, "bin", "nvcc")
    version = _nvcc_version(nvcc, home, ev["cuda_home"]["how"], deadline, ev)
    torch_cuda = ev["cuda_home"]["torch"].get("cuda")
    if torch_cuda and torch_cuda.split(".")[0] != str(version[0]):
        problems.append((f"CUDA major mismatch: torch is built for CUDA {torch_cuda}, nvcc is "
                         f"{version[0]}.{version[1]}", ""))
    _arch_support(ctx, version, ev, problems)
    cxx = _host_tools(home, env, ev, problems)
    ev["smoke"] = _smoke(ctx, deadline, nvcc, home, cxx, problems)
    if problems:
        reason, log = problems[0]
        ev["problems"] = [p[0] for p in problems]
        raise core.StageFailed(reason, ev, log)
    return ev


def _cuda_home(ctx: core.Context, deadline: Deadline, env: Dict[str, str], ev: Dict[str, Any]) -> str:
    """The CUDA home, found the way the libraries look for it; none fails the stage at once: nothing after
    it can run."""
    home, how = cudatools.find_cuda_home(env)
    ev["cuda_home"] = {"path": home, "how": how, "torch": _torch_view(ctx, deadline, ev),
                       "pip_nvcc_not_pointed_at": [p for p in cudatools.stray_nvccs()
                                                   if not home or not p.startswith(home)]}
    # versions of the pip toolkit components: a cicc newer than ptxas fails at compile time
    ev["toolkit_wheels"] = cudatools.installed_versions(TOOLKIT_WHEELS)
    if home is None:
        stray = ev["cuda_home"]["pip_nvcc_not_pointed_at"]
        extra = f"; pip installed nvcc at {stray[0]}, but nothing points at it" if stray else ""
        msg = f"CUDA toolkit not discoverable: {how}{extra}"
        raise core.StageFailed(msg, ev)
    return home


def _nvcc_version(nvcc: str, home: str, how: str, deadline: Deadline, ev: Dict[str, Any]) -> Tuple[int, int]:
    """nvcc's release; an nvcc that does not run fails the stage at once (every later check compiles)."""
    ok, _took, out = cudatools.run([nvcc, "--version"], deadline)
    version = cudatools.release(out) if ok else None
    if version is None:   # say what the folder holds: a runtime-only CUDA home is not "no CUDA home"
        msg = loaderfacts.cuda_home_problem(home, how) or f"nvcc at {nvcc} does not run (found via {how})"
        raise core.StageFailed(msg, ev, out)
    ev["nvcc"] = {"path": nvcc, "version": "%d.%d" % version}
    ev["versions"]["nvcc"] = "%d.%d" % version
    return version


def _arch_support(ctx: core.Context, version: Tuple[int, int], ev: Dict[str, Any],
                  problems: List[Tuple[str, str]]) -> None:
    """Is nvcc new enough for each arch? Too old for a target is a problem; for an arch only audited, a warning."""
    ev["nvcc"]["knows"] = {}
    for arch in ctx.every_arch():
        need = cudatools.min_nvcc(arch)
        ev["nvcc"]["knows"][arch] = version >= need
        if version >= need:
            continue
        too_old = f"nvcc {version[0]}.{version[1]} is too old for {arch} (needs CUDA >= {need[0]}.{need[1]})"
        if arch in ctx.archs:
            problems.append((too_old, ""))
        else:
            ev.setdefault("warnings", []).append(f"{arch} is not a target arch; {too_old}")


def _host_tools(home: str, env: Dict[str, str], ev: Dict[str, Any],
               problems: List[Tuple[str, str]]) -> Optional[str]:
    """Headers, a host compiler and ninja: what a JIT compile needs besides nvcc. Returns the host compiler."""
    ev["headers"] = _headers(home)
    missing = [h for h, where in ev["headers"].items() if where is None]
    if missing:
        problems.append((f"CUDA headers missing under {home}/include: {', '.join(missing)}", ""))
    cxx = cudatools.host_compiler(env)
    ev["host_compiler"] = cxx
    if cxx is None:
        problems.append(("no host compiler: nvcc needs g++ (or NVCC_CCBIN) on PATH, found none in "
                         + env.get("PATH", ""), ""))
    on_path, beside = cudatools.ninja(env)
    ev["ninja"] = {"on_path": on_path, "beside_python": beside}
    if on_path is None:
        where = f" (there is one at {beside}: put its folder on PATH)" if beside else ""
        problems.append((f"ninja not found on PATH{where}", ""))
    return cxx


def _torch_view(ctx: core.Context, deadline: Deadline, ev: Dict[str, Any]) -> Dict[str, Any]:
    """torch's own answer (torch.utils.cpp_extension.CUDA_HOME), when torch imports."""
    if ctx.results.get("import:torch", {}).get("status") == core.FAILED:
        return {"error": "torch does not import"}
    proc = core.python_snippet(TORCH_CUDA, timeout=deadline.capped(120.0))
    for line in (proc.stdout or "").splitlines():
        if line.startswith("@@torch "):
            view: Dict[str, Any] = json.loads(line[len("@@torch "):])
            return view
    return {"error": cudatools.error_line(proc.stdout or "")}


def _headers(home: str) -> Dict[str, Any]:
    roots = [os.path.join(home, "include"), os.path.join(home, "include", "cccl"),
             os.path.join(home, "targets", "x86_64-linux", "include")]
    out: Dict[str, Any] = {}
    for header in ("cuda_runtime.h", os.path.join("cuda", "std", "cstdint")):
        out[header] = next((r for r in roots if os.path.exists(os.path.join(r, header))), None)
    return out


def _smoke(ctx: core.Context, deadline: Deadline, nvcc: str, home: str, cxx: Any,
           problems: List[Tuple[str, str]]) -> Dict[str, Any]:
    """Compile a tiny kernel for each arch (host + device), then link it with -lcudart -lcuda."""
    work = os.path.join(ctx.workdir, "toolchain")
    shutil.rmtree(work, ignore_errors=True)   # a fresh folder: every run really compiles
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "smoke.cu"), "w") as fh:
        fh.write(SMOKE_CU)
    per_arch: Dict[str, Any] = {}
    objects = []
    # side by side, one per core: under QEMU emulation each is half a minute of one core
    compiled = core.side_by_side(
        {arch: partial(cudatools.run, [nvcc, "-c", "smoke.cu", "-o", f"smoke_{arch}.o", "-Xcompiler", "-fPIC",
                                       *cudatools.gencode(arch)], deadline, cwd=work) for arch in ctx.archs},
        most=os.cpu_count() or 1)
    for arch, (ok, took, log) in compiled.items():
        per_arch[arch] = {"compile": "ok" if ok else "failed", "seconds": took}
        if ok:
            objects.append(f"smoke_{arch}.o")
        else:
            per_arch[arch]["error"] = cudatools.error_line(log)
            problems.append((f"nvcc cannot compile for {arch}: {per_arch[arch]['error']}", log))
    result: Dict[str, Any] = {"per_arch": per_arch}
    if objects and cxx:
        ok, took, log = cudatools.run([cxx, "-shared", objects[0], "-o", "smoke.so",
                                       *cudatools.link_dirs(home), "-lcudart", "-lcuda"], deadline, cwd=work)
        result["link"] = {"ok": ok, "seconds": took, "libraries": ["-lcudart", "-lcuda"]}
        if not ok:
            result["link"]["error"] = cudatools.error_line(log)
            problems.append((f"linking with -lcudart -lcuda failed: {result['link']['error']}", log))
    return result
