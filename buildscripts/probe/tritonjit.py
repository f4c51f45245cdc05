"""Triton's part of the JIT-compile stage: a small kernel compiled for each arch with the ptxas Triton runs.

Triton compiles for a `GPUTarget` without a GPU, so every target arch (and every arch only audited) is
compiled here as it would be at the first launch on that GPU. Triton assembles with its own bundled
ptxas unless TRITON_PTXAS_PATH (TRITON_PTXAS_BLACKWELL_PATH for sm_100 and newer, Triton >= 3.6) points
elsewhere, and a bundled ptxas older than the arch fails with "ptxas fatal : Value 'sm_121a' is not
defined for option 'gpu-name'" (triton-lang/triton#8539). For an arch that fails, the same compile runs
once more with the override pointed at the image's CUDA toolkit ptxas, so the fix is named and shown
to work (or not). Standard library only: Triton runs in child interpreters of the image's Python.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import core, cudatools, fatbin
from .cudatools import Deadline

PREFIX = "@@triton "
# argv[1]: comma-separated compute capabilities. One JSON line per capability (Triton's own output, a PTX
# dump when ptxas fails, goes to the log). The kernel is the Triton tutorial's vector add.
COMPILE = r"""
import inspect, json, os, sys, time
caps = [int(c) for c in sys.argv[1].split(",")]
def say(**fields):
    print("@@triton " + json.dumps(fields), flush=True)
try:
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
except Exception as exc:
    say(error=f"{type(exc).__name__}: {exc}"[:600]); sys.exit(0)

@triton.jit
def probe_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
bundled_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")

def ptxas(cap):
    # (path, CUDA release, the variable that overrides it) of the ptxas Triton runs for `cap`
    try:
        from triton import knobs
        fields = vars(type(knobs.nvidia))
        name = "ptxas_blackwell" if cap >= 100 and "ptxas_blackwell" in fields else "ptxas"
        tool = getattr(knobs.nvidia, name)
        return tool.path, tool.version, fields[name].key
    except (ImportError, AttributeError, KeyError):  # Triton < 3.4: no knobs
        from triton.backends.nvidia import compiler
        path, version = compiler._path_to_binary("ptxas")
        found = __import__("re").search(r"release (\d+\.\d+)", version)
        return path, found.group(1) if found else version, "TRITON_PTXAS_PATH"

for cap in caps:
    fields = {"capability": cap}
    try:
        path, release, override = ptxas(cap)
        fields.update(ptxas=path, ptxas_cuda=release, override=override, override_set=os.environ.get(override),
                      bundled=os.path.dirname(os.path.realpath(path)) == os.path.realpath(bundled_dir))
    except Exception as exc:
        fields["ptxas_error"] = f"{type(exc).__name__}: {exc}"[:300]
    started = time.time()
    try:
        if "constexprs" in inspect.signature(triton.compiler.ASTSource).parameters:
            source = triton.compiler.ASTSource(fn=probe_add, signature=SIGNATURE, constexprs={"BLOCK": 128})
        else:  # Triton <= 3.2
            source = triton.compiler.ASTSource(fn=probe_add, signature=SIGNATURE, constants={"BLOCK": 128})
        kernel = triton.compile(source, target=GPUTarget("cuda", cap, 32))
        fields.update(ok=True, cubin_bytes=len(kernel.asm["cubin"]))
    except Exception as exc:
        fields.update(ok=False, error=f"{type(exc).__name__}: {exc}"[-1500:])
    fields["seconds"] = round(time.time() - started, 2)
    say(triton=triton.__version__, **fields)
"""

Part = Tuple[str, Dict[str, Any], Optional[Tuple[str, str]]]   # as jitcompile.Part


def capability(arch: str) -> int:
    """sm_121a -> 121: what GPUTarget takes (Triton adds the `a` itself from sm_90 on)."""
    return fatbin.parse_arch(arch)[0]


def compile_for(archs: List[str], deadline: Deadline, work: str,
                env: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Dict[str, Any]], str]:
    """Per arch what Triton's compile reported (a fresh cache, so it really compiles), and the output."""
    os.makedirs(work, exist_ok=True)
    cache = os.path.join(work, f"cache-{len(os.listdir(work))}")
    script = os.path.join(work, "probe_triton.py")  # @triton.jit reads its kernel's source from a file
    with open(script, "w") as fh:
        fh.write(COMPILE)
    proc = core.sh([sys.executable, script, ",".join(str(capability(a)) for a in archs)],
                   timeout=deadline.capped(300.0), env={"TRITON_CACHE_DIR": cache, **(env or {})})
    out = proc.stdout or ""
    found = [json.loads(ln[len(PREFIX):]) for ln in out.splitlines() if ln.startswith(PREFIX)]
    by_cap = {f["capability"]: f for f in found if "capability" in f}
    failed_import = next((f["error"] for f in found if "capability" not in f), None)
    results = {}
    for arch in archs:
        result = by_cap.get(capability(arch))
        if result is None:
            why = failed_import or f"no result (exit code {proc.returncode}): {cudatools.error_line(out)}"
            result = {"ok": False, "error": why}
        if not result.get("ok"):
            result["error"] = cudatools.error_line(result.get("error") or "") or result.get("error")
        results[arch] = result
    return results, out


def toolkit_ptxas(env: Dict[str, str]) -> Optional[str]:
    """The CUDA toolkit's ptxas (the CUDA home's, else one a pip wheel put beside nvcc), or None."""
    home, _ = cudatools.find_cuda_home(env)
    candidates = ([os.path.join(home, "bin", "ptxas")] if home else []) + [
        os.path.join(os.path.dirname(nvcc), "ptxas") for nvcc in cudatools.stray_nvccs()]
    return next((p for p in candidates if os.access(p, os.X_OK)), None)


def fix(arch: str, result: Dict[str, Any], retried: Optional[Dict[str, Any]], toolkit: Optional[str]) -> str:
    """The fix for an arch Triton cannot compile for, naming the variable and the ptxas to point it at."""
    override = result.get("override") or "TRITON_PTXAS_PATH"
    need = "%d.%d" % cudatools.min_nvcc(arch)
    if retried is not None and retried.get("ok"):
        return f"set {override}={toolkit} (the toolkit's ptxas, CUDA {retried.get('ptxas_cuda', '?')}, compiles it)"
    if toolkit and (retried is not None or result.get("ptxas") == toolkit):
        return (f"point {override} at a ptxas of CUDA >= {need} (the toolkit's {toolkit} does not compile it "
                "either), or use a newer Triton")
    if toolkit:
        return f"set {override}={toolkit} (the toolkit's ptxas; not tried here), or use a newer Triton"
    return f"install a CUDA >= {need} ptxas and set {override} to it, or use a newer Triton"


def describe(result: Dict[str, Any]) -> str:
    """`Triton 3.5.1 with its bundled ptxas (CUDA 12.8, PATH)`, `... with the ptxas TRITON_PTXAS_PATH names`, or
    `Triton` when the compile said nothing about its ptxas."""
    if not result.get("ptxas"):
        return "Triton"
    which = "its bundled ptxas" if result.get("bundled") else f"the ptxas {result.get('override')} names"
    return f"Triton {result.get('triton')} with {which} (CUDA {result.get('ptxas_cuda')}, {result['ptxas']})"


def run(targets: List[str], also: List[str], deadline: Deadline, work: str) -> Part:
    """The Triton part: ("ok"|"failed"|"absent", evidence, failure) with per-arch results; an arch only
    audited that fails becomes a warning in the evidence, a target that fails fails the part."""
    if not _installed():
        return "absent", {"note": "triton is not installed"}, None
    archs = list(dict.fromkeys([*targets, *also]))
    results, out = compile_for(archs, deadline, os.path.join(work, "triton"))
    ev: Dict[str, Any] = {"per_arch": {a: "ok" if r.get("ok") else "failed" for a, r in results.items()},
                          "compiles": results}
    failing = [a for a, r in results.items() if not r.get("ok")]
    toolkit = toolkit_ptxas(dict(os.environ))
    retried: Dict[str, Dict[str, Any]] = {}
    overrides = {str(results[a]["override"]) for a in failing if results[a].get("override")}
    if toolkit and overrides and all(results[a].get("ptxas") != toolkit for a in failing):
        again, _ = compile_for(failing, deadline, os.path.join(work, "triton"), env={o: toolkit for o in overrides})
        retried = {a: again[a] for a in failing}
        ev["with_toolkit_ptxas"] = {"ptxas": toolkit, "per_arch": {a: "ok" if r.get("ok") else "failed"
                                                                   for a, r in retried.items()}}
    problems = []
    for arch in failing:
        result = results[arch]
        said = (f"{describe(result)} cannot compile for {arch}: {result.get('error')}; "
                f"{fix(arch, result, retried.get(arch), toolkit)}")
        if arch in targets:
            problems.append(said)
        else:
            ev.setdefault("warnings", []).append(f"{arch} is not a target arch; {said}")
    if problems:
        return "failed", ev, ("; ".join(problems), out[-6000:])
    return "ok", ev, None


def _installed() -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False
