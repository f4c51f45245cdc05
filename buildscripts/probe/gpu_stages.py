"""The GPU stages that need no server: gpu-visible, kernel-smoke (stdlib only). The server and
first-generation stages are in serving.py.

Heavy work runs in fresh interpreters of the image's own Python (core.python_snippet), so a CUDA
crash fails a stage instead of the probe. Without a GPU, gpu-visible is SKIPPED with the reason
and core.run_stage skips the GPU stages after it, so nothing here can pass on a CPU machine.
The pure decision function (judge_gpu) is unit-tested on its own.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import core, devnodes, gpumemory, jitlog, pruned, server, smokeparts, warmcheck
from .cudatools import Deadline

JSON_PREFIX = "@@json "
NO_GPU_ENV = "PROBE_NO_GPU_REASON"  # set by the host when it could not hand a GPU to the container


def _json_line(out: str) -> Optional[Dict[str, Any]]:
    lines = [ln for ln in out.splitlines() if ln.startswith(JSON_PREFIX)]
    return json.loads(lines[-1][len(JSON_PREFIX):]) if lines else None


# ------------------------------------------------------------------------------------ gpu-visible

GPU_QUERY = r"""
import ctypes, json, warnings
out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    out.update(torch=torch.__version__, cuda_runtime=torch.version.cuda, arch_list=torch.cuda.get_arch_list())
    try:
        torch.cuda.init()
        out["count"] = torch.cuda.device_count()
        major, minor = torch.cuda.get_device_capability(0)
        out.update(capability=f"{major}.{minor}", name=torch.cuda.get_device_name(0))
        free, total = torch.cuda.mem_get_info(0)  # before anything is allocated: what others hold (gpumemory)
        out["memory"] = {"free_bytes": free, "total_bytes": total}
        out["uuid"] = str(getattr(torch.cuda.get_device_properties(0), "uuid", ""))  # the host looks it up
        out["sum"] = float(torch.ones(1 << 20, device="cuda").sum())  # a real allocation and kernel
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["warnings"] = [str(w.message)[:300] for w in caught]
try:
    version = ctypes.c_int()
    ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
    out["driver_cuda"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
except OSError as exc:
    out["driver_cuda_error"] = str(exc)
print("@@json " + json.dumps(out))
"""


def _cuda_tuple(version: Optional[str]) -> Tuple[int, int]:
    parts = (version or "0.0").split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def judge_gpu(info: Dict[str, Any], archs: List[str]) -> Tuple[bool, str, Dict[str, Any]]:
    """(ok, reason, gpu) from torch's view of the GPU: target arch, torch kernels, driver vs runtime."""
    runtime, driver = info.get("cuda_runtime"), info.get("driver_cuda")
    notes = " ".join([info.get("error") or "", *info.get("warnings", [])])
    if (driver and runtime and _cuda_tuple(driver)[0] < _cuda_tuple(runtime)[0]) or "too old" in notes:
        return False, (f"NVIDIA driver too old: it supports CUDA {driver or '?'}, "
                       f"torch needs CUDA {runtime}; "
                       f"install a driver for CUDA {runtime} or use an image of an older CUDA lane"), {}
    if info.get("error") or not info.get("count"):
        return False, f"torch sees no usable GPU: {info.get('error') or 'device_count() is 0'}", {}
    major, minor = _cuda_tuple(info["capability"])
    arch = f"sm_{major}{minor}"
    gpu = {"name": info.get("name"), "arch": arch, "capability": info["capability"], "count": info["count"],
           "driver_cuda": driver, "cuda_runtime": runtime}
    targets = [a for a in archs if re.sub(r"[af]$", "", a) == arch]
    if archs and not targets:
        return False, f"GPU arch {arch} is not among the image's target archs ({', '.join(archs)})", gpu
    torch_archs = info.get("arch_list") or []
    ptx = [a for a in torch_archs
           if a.startswith("compute_") and int(a[8:].rstrip("af")) <= major * 10 + minor]
    if arch not in torch_archs and not ptx:
        why = f"torch {info.get('torch')} has no kernels for {arch} (it has {' '.join(torch_archs)})"
        return False, why, gpu
    return True, "", gpu


def _nvidia_smi() -> Dict[str, str]:
    """The driver and the GPU's name; when nvidia-smi fails, its own words ("Failed to initialize NVML:
    Insufficient Permissions") for the stage's evidence and log."""
    found = core.sh(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"], timeout=60)
    if found.returncode != 0 or not found.stdout.strip():
        said = found.stdout.strip()[-500:]
        return {"nvidia_smi_error": said} if said and found.returncode != 127 else {}
    driver, _, name = found.stdout.splitlines()[0].partition(", ")
    return {"driver": driver.strip(), "smi_name": name.strip()}


@core.stage("gpu-visible")
def gpu_visible(ctx: core.Context) -> Dict[str, Any]:
    if os.environ.get(NO_GPU_ENV):
        msg = f"no GPU visible: {os.environ[NO_GPU_ENV]}"
        raise core.StageSkipped(msg)
    nodes = glob.glob("/dev/nvidia[0-9]*")
    if not nodes and shutil.which("nvidia-smi") is None:
        msg = (
            "no GPU visible: no /dev/nvidia* device and no nvidia-smi "
                                "(a container needs the NVIDIA runtime and a GPU request)"
        )
        raise core.StageSkipped(msg)
    done = core.python_snippet(GPU_QUERY, timeout=min(ctx.stage_timeout, 300))
    info = _json_line(done.stdout)
    if info is None:
        msg = "could not query the GPU through torch"
        raise core.StageFailed(msg, log=done.stdout)
    info.update(_nvidia_smi(), device_nodes=len(nodes), node_access=devnodes.observe())
    info["memory"], crowded = gpumemory.observe(info.get("memory"))
    ok, reason, gpu = judge_gpu(info, ctx.archs)
    if crowded:  # a shared GPU passes with the tiny model too: said, never failing
        info["warnings"] = [*info.get("warnings", []), crowded]
    if not ok:
        refused = devnodes.refused(info["node_access"])
        said = info.get("nvidia_smi_error")
        raise core.StageFailed(reason + (f"; {refused}" if refused else ""), evidence=info,
                               log=done.stdout + (f"\nnvidia-smi: {said}" if said else ""))
    gpu["driver"] = info.get("driver") or gpu["driver_cuda"]
    ctx.gpu = gpu
    return info


# ----------------------------------------------------------------------------------- kernel-smoke

def _kernel_check(name: str, code: str, timeout: float, env: Dict[str, str],
                  path: Optional[str] = None) -> Dict[str, Any]:
    """What a check's child said (its last @@json line), or its failure from its output when it said nothing.
    `path`: the child's source is written there and run from the file (Triton reads its kernel's source)."""
    done = _run_child(code, timeout, env, path)
    found = _json_line(done.stdout)
    if found is None:
        trace = server.last_traceback(done.stdout.splitlines())
        # The exception's line, not the output's last: C code (deep_gemm) prints after the traceback.
        found = {"ok": False, "exit_code": done.returncode, "error": _last_error(trace or done.stdout),
                 "log": (trace or done.stdout)[-4000:]}
    elif found.get("ok"):
        return found
    else:
        found.setdefault("error", f"{name} computed a wrong result (compared with torch)")
        found.update(exit_code=done.returncode, log=done.stdout[-4000:])
    if jitlog.jit_failed(done.stdout):  # a JIT compile under the launch failed: the compiler's words
        _keep_compiler_words(found, name, code, timeout, env, done.stdout, path)
    return found


def _run_child(code: str, timeout: float, env: Dict[str, str],
               path: Optional[str]) -> "subprocess.CompletedProcess[str]":
    if path is None:
        return core.python_snippet(code, timeout=timeout, env=env)
    with open(path, "w") as fh:
        fh.write(code)
    return core.sh([sys.executable, path], timeout=timeout, env=env)


def _keep_compiler_words(failed: Dict[str, Any], name: str, code: str, timeout: float, env: Dict[str, str],
                         output: str, path: Optional[str] = None) -> None:
    """A JIT compile failed: the same call once more with the library's debug switches (deep_gemm then
    prints its nvcc command), and the compiler's first error becomes the check's error. Not a retry: the
    check has failed already, whatever the second run does."""
    words = jitlog.compiler_words(output)
    debug = jitlog.DEBUG_ENV.get(name)
    if debug:
        again = _run_child(code, timeout, {**env, **debug}, path)
        failed["debug_rerun"] = {"env": debug, "exit_code": again.returncode}
        words = jitlog.compiler_words(again.stdout) or words
    if words:
        failed["compiler"] = {k: v for k, v in words.items() if k != "excerpt"}
        failed["library_error"], failed["error"] = failed["error"], words["error"]
        failed["log"] = failed["log"][-2500:] + "\n" + jitlog.excerpt(words)


def _last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


@core.stage("kernel-smoke", needs=("gpu-visible",), gpu=True)
def kernel_smoke(ctx: core.Context) -> Dict[str, Any]:
    """One compiled op of every kernel library the image ships, launched, waited for and compared with torch
    (smokeparts.py); a library not installed is skipped with the reason. In an image that claims baked kernel
    caches the checks load from them, as a server does; what a check had to compile into them is named."""
    gpu = ctx.gpu or {}
    work = os.path.join(ctx.workdir, "smoke")
    shutil.rmtree(work, ignore_errors=True)   # a fresh Triton cache: its kernel compiles here, for this GPU
    os.makedirs(work, exist_ok=True)
    env = {"TORCH_CUDA_ARCH_LIST": str(gpu.get("capability", "")),  # build only for the GPU in hand
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", os.path.join(ctx.workdir, "torch_ext")),
           "TRITON_CACHE_DIR": os.path.join(work, "triton-cache")}
    claim = warmcheck.load_claim()
    caches = warmcheck.watched_dirs(claim, {**os.environ, **env}) if claim else []
    deadline = Deadline(ctx.stage_timeout)   # the host ends a stage that runs past it: every part shares it
    checks: Dict[str, Any] = {}
    compiled: Dict[str, List[str]] = {}
    for part in smokeparts.PARTS:
        why = smokeparts.skip_reason(part, gpu)
        if why:
            checks[part.key] = smokeparts.skipped(part, why)
            continue
        before = warmcheck.snapshot(caches)
        checks[part.key] = _run_part(part, gpu, deadline.capped(600.0), env, work)
        wrote = warmcheck.changed(before, warmcheck.snapshot(caches))
        if wrote:   # changed while this check ran (the server's start beside may own some: a file does not say)
            checks[part.key]["compiled_into_caches"] = wrote[:warmcheck.SHOWN]
            compiled[part.key] = wrote
            ctx.compiled_by_checks.update(wrote)
    rewritten = sorted(pruned.libraries())
    if rewritten:  # every fatbin the image's pruner rewrote that has code for this GPU must load
        loaded = _kernel_check("pruned fatbins", pruned.driver_snippet(rewritten), deadline.capped(600.0),
                               {**env, **pruned.DRIVER_ENV})
        checks["pruned-fatbins"] = {**loaded, "outcome": "passed" if loaded.get("ok") else "failed"}
    said = warmcheck.checks_compiled(claim, compiled, str(gpu.get("arch") or "an unknown arch")) if claim else {}
    failed = {k: v for k, v in checks.items() if v.get("ok") is False}
    if failed:   # what the checks compiled is said on a failure too: the server beside left it to this stage
        logs = "\n\n".join(f"== {k}\n{v.get('log', '')}" for k, v in failed.items())
        evidence = {k: {f: x for f, x in v.items() if f != "log"} for k, v in checks.items()}
        raise core.StageFailed("; ".join(f"{k}: {v['error']}" for k, v in failed.items()), {**evidence, **said}, logs)
    return {**checks, **said}


def _run_part(part: smokeparts.Part, gpu: Dict[str, Any], timeout: float, env: Dict[str, str],
              work: str) -> Dict[str, Any]:
    """One part's record: what its child said, with the library's version, the child's wall time and the outcome."""
    started = time.monotonic()
    try:
        found = _kernel_check(part.jit_name or part.key, smokeparts.source(part, gpu), timeout, env,
                              os.path.join(work, f"part-{part.key}.py"))  # no module name: never imported
    except core.StageFailed as exc:   # this part ran out of time: its failure, the other parts' records kept
        found = {"ok": False, "error": exc.reason, "log": exc.log[-4000:]}
    found.setdefault("library", part.key)
    found.setdefault("op", part.op)
    found.update(installed=smokeparts.version(part), wall_s=round(time.monotonic() - started, 2),
                 outcome="passed" if found.get("ok") else "failed")
    return found
