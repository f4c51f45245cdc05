"""The GPU stages: gpu-visible, kernel-smoke, server, first-generation (stdlib only).

Heavy work runs in fresh interpreters of the image's own Python (core.python_snippet), so a CUDA
crash fails a stage instead of the probe. Without a GPU, gpu-visible is SKIPPED with the reason
and core.run_stage skips the other three, so nothing here can pass on a CPU machine.
The pure decision functions (judge_gpu, compare_tokens) are unit-tested on their own.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import core, jitlog, pruned, server, warmcheck

HERE = os.path.dirname(os.path.abspath(__file__))
JSON_PREFIX = "@@json "
PROMPT = "bormo dimnir hinfa irfa"  # chosen so every CPU greedy step has a margin > 0.37
NEW_TOKENS = 16
NEAR_TIE = 0.2                     # logit margin under which bf16 rounding may pick the other token
NO_GPU_ENV = "PROBE_NO_GPU_REASON"  # set by the host when it could not hand a GPU to the container
JIT_MARKERS = re.compile(r"ninja|nvcc|Compiling|JIT|jit_kernel", re.I)
_LIVE: Dict[str, Any] = {}          # the running server, handed from `server` to `first-generation`


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
    found = core.sh(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"], timeout=60)
    if found.returncode != 0 or not found.stdout.strip():
        return {}
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
    info.update(_nvidia_smi(), device_nodes=len(nodes))
    ok, reason, gpu = judge_gpu(info, ctx.archs)
    if not ok:
        raise core.StageFailed(reason, evidence=info, log=done.stdout)
    gpu["driver"] = info.get("driver") or gpu["driver_cuda"]
    ctx.gpu = gpu
    return info


# ----------------------------------------------------------------------------------- kernel-smoke

TORCH_EXTENSION = r"""
import json, os, time, torch
from torch.utils.cpp_extension import load_inline
cuda = '''
__global__ void axpy_kernel(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    axpy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                          out.data_ptr<float>(), (float)a, n);
    return out;
}
'''
t = time.time()
ext = load_inline(name="probe_axpy",
                  cpp_sources="torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a);",
                  cuda_sources=cuda, functions=["axpy"], extra_cuda_cflags=["-O2"], verbose=False)
built = time.time() - t
x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
err = float((ext.axpy(x, y, 3.0) - (3.0 * x + y)).abs().max())
print("@@json " + json.dumps({"build_s": round(built, 1), "max_abs_err": err, "ok": err < 1e-5}))
"""

FLASHINFER_OP = r"""
import json, time, torch, flashinfer
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
t = time.time()
y = flashinfer.norm.rmsnorm(x, w, eps=1e-6)
torch.cuda.synchronize()
built = time.time() - t
xf = x.float()
ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
err = float((y.float() - ref).norm() / ref.norm())
print("@@json " + json.dumps({"op": "flashinfer.norm.rmsnorm", "version": flashinfer.__version__,
                              "first_call_s": round(built, 1), "rel_err": err, "ok": err < 1e-2}))
"""

DEEP_GEMM_OP = r"""
import json, time, torch, deep_gemm
m, n, k = 256, 512, 1024
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
d = torch.empty(m, n, device="cuda", dtype=torch.float32)
t = time.time()
deep_gemm.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
built = time.time() - t
ref = a.double() @ b.double().T
diff = float(1 - 2 * (d.double() * ref).sum() / (d.double().square().sum() + ref.square().sum()))
print("@@json " + json.dumps({"op": "deep_gemm.bf16_gemm_nt", "shape": [m, n, k],
                              "first_call_s": round(built, 1),
                              "diff": diff, "ok": diff < 1e-3}))
"""


def _kernel_check(name: str, code: str, timeout: float, env: Dict[str, str]) -> Dict[str, Any]:
    done = core.python_snippet(code, timeout=timeout, env=env)
    found = _json_line(done.stdout)
    if found is None:
        trace = server.last_traceback(done.stdout.splitlines())
        # The exception's line, not the output's last: C code (deep_gemm) prints after the traceback.
        failed = {"ok": False, "exit_code": done.returncode, "error": _last_error(trace or done.stdout),
                  "log": (trace or done.stdout)[-4000:]}
        if jitlog.jit_failed(done.stdout):
            _keep_compiler_words(failed, name, code, timeout, env, done.stdout)
        return failed
    if not found.get("ok"):
        found.setdefault("error", f"{name} computed a wrong result (compared with torch)")
    return found


def _keep_compiler_words(failed: Dict[str, Any], name: str, code: str, timeout: float, env: Dict[str, str],
                         output: str) -> None:
    """A JIT compile failed: the same call once more with the library's debug switches (deep_gemm then
    prints its nvcc command), and the compiler's first error becomes the check's error. Not a retry: the
    check has failed already, whatever the second run does."""
    words = jitlog.compiler_words(output)
    debug = jitlog.DEBUG_ENV.get(name)
    if debug:
        again = core.python_snippet(code, timeout=timeout, env={**env, **debug})
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
    gpu = ctx.gpu or {}
    major = int(str(gpu.get("capability", "0.0")).split(".")[0])
    env = {"TORCH_CUDA_ARCH_LIST": str(gpu.get("capability", ""))}  # build only for the GPU in hand
    env["TORCH_EXTENSIONS_DIR"] = os.environ.get("TORCH_EXTENSIONS_DIR",
                                                 os.path.join(ctx.workdir, "torch_ext"))
    timeout = min(ctx.stage_timeout, 600.0)
    checks: Dict[str, Any] = {
        "torch-extension": _kernel_check("torch extension", TORCH_EXTENSION, timeout, env),
        "flashinfer": _kernel_check("flashinfer", FLASHINFER_OP, timeout, env)}
    rewritten = sorted(pruned.libraries())
    if rewritten:  # every fatbin the image's pruner rewrote that has code for this GPU must load
        checks["pruned-fatbins"] = _kernel_check("pruned fatbins", pruned.driver_snippet(rewritten), timeout,
                                                 {**env, **pruned.DRIVER_ENV})
    if major in (9, 10):
        checks["deep_gemm"] = _kernel_check("deep_gemm", DEEP_GEMM_OP, timeout, env)
    else:  # DeepGEMM has kernels for sm_90 and sm_100 only (not sm_120, not older)
        checks["deep_gemm"] = {"ok": None, "skipped": f"deep_gemm has no kernels for {gpu.get('arch')}"}
    failed = {k: v for k, v in checks.items() if v.get("ok") is False}
    if failed:
        logs = "\n\n".join(f"== {k}\n{v.get('log', '')}" for k, v in failed.items())
        evidence = {k: {f: x for f, x in v.items() if f != "log"} for k, v in checks.items()}
        raise core.StageFailed("; ".join(f"{k}: {v['error']}" for k, v in failed.items()), evidence, logs)
    return checks


# ----------------------------------------------------------------------------------------- server

def _flag(args: List[str], name: str) -> Optional[str]:
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def _make_tiny_model(ctx: core.Context) -> str:
    out = os.path.join(ctx.workdir, "tiny-llama")
    done = core.sh([sys.executable, os.path.join(HERE, "tinymodel.py"), "make", out], timeout=600)
    if done.returncode != 0:
        msg = "could not make the tiny test model in the image"
        raise core.StageFailed(msg, log=done.stdout)
    return out


def _start_reference(ctx: core.Context, model: str) -> None:
    """The CPU decode runs while the server starts; first-generation collects it."""
    path = os.path.join(ctx.workdir, "reference.json")
    argv = [sys.executable, os.path.join(HERE, "tinymodel.py"), "reference", model, "--prompt", PROMPT,
            "--max-new-tokens", str(NEW_TOKENS)]
    with open(path, "w") as out:
        _LIVE["reference"] = (subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               env=dict(os.environ, CUDA_VISIBLE_DEVICES="")), path)


UNKNOWN_FLAGS = re.compile(r"error: unrecognized arguments: (.+)")


def unrecognized_flags(lines: List[str]) -> Optional[str]:
    """The flags argparse refused, when the server exited because of them."""
    for line in lines:
        match = UNKNOWN_FLAGS.search(line)
        if match:
            return match.group(1).strip()
    return None


@core.stage("server", needs=("gpu-visible",), gpu=True)
def launch_server(ctx: core.Context) -> Dict[str, Any]:
    os.makedirs(ctx.workdir, exist_ok=True)
    model = ctx.model_path or _make_tiny_model(ctx)
    atexit.register(_stop_live)  # before anything starts: no reference decode or server outlives the probe
    if not ctx.model_path:
        _start_reference(ctx, model)
    args = list(ctx.server_args)
    port = int(_flag(args, "--port") or server.free_port())
    host_args = [] if "--host" in args else ["--host", "127.0.0.1"]
    port_args = [] if "--port" in args else ["--port", str(port)]
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model,
            *host_args, *port_args, *args]
    claim = warmcheck.load_claim()
    watch = warmcheck.Watch(warmcheck.watched_dirs(claim, dict(os.environ, **ctx.server_env))).start() \
        if claim else None
    srv = server.start(argv, port, os.path.join(ctx.workdir, f"server-{port}.log"), env=ctx.server_env)
    ready = server.wait_ready(srv, "/health_generate", deadline_s=ctx.stage_timeout)
    jit_lines = sum(1 for line in srv.tail if JIT_MARKERS.search(line))
    evidence = {"argv": argv[1:], "env": ctx.server_env, "model": model, "tiny_model": not ctx.model_path,
                "log": srv.log_path, "jit_log_lines": jit_lines, **ready.as_evidence()}
    if watch is not None and claim is not None:
        evidence["warm"] = {"report": claim["path"], "profile": ctx.server_profile,
                            "profile_baked": warmcheck.covers(claim, ctx.server_profile),
                            "declared_at_start": warmcheck.declared(claim, ctx.server_profile),
                            "first_start": claim.get("first_start", []), **watch.stop()}
    if not ready.ready:
        excerpt = server.failure_excerpt(srv)
        evidence["shutdown"] = server.stop(srv)
        _stop_live()  # the reference decode is not needed any more
        if ready.exit_code is not None:
            why = (f"server process exited with code {ready.exit_code} after {ready.waited_s:.0f}s, "
                   "before it was ready")
        else:
            why = (f"server not ready within {ctx.stage_timeout:.0f}s "
                   f"(readiness timeout; last answer {ready.last_answer})")
        refused = unrecognized_flags(list(srv.tail)) if ready.exit_code is not None else None
        if refused:  # a profile written for another SGLang: it says nothing about this image
            raise core.StageSkipped("this SGLang does not know the server profile's flag(s) %s: the profile "
                                    "does not apply to this image" % refused)
        trace = server.last_traceback(list(srv.tail))
        if trace:
            why += ": " + trace.strip().splitlines()[-1][:300]
        raise core.StageFailed(why, evidence, excerpt)
    # Only a profile the image baked is held to "nothing compiles"; another one compiles at first start,
    # as the bake report says, and its compiles are kept as evidence.
    warm = evidence.get("warm")
    cold = warmcheck.verdict(warm, tuple(warm["declared_at_start"])) if warm and warm["profile_baked"] else None
    if cold:  # warm caches claimed, yet the start compiled: the claim is false (the server did come up)
        evidence["shutdown"] = server.stop(srv)
        _stop_live()
        raise core.StageFailed(cold, evidence)
    _LIVE["server"] = srv
    return evidence


def _stop_live() -> Optional[Dict[str, Any]]:
    srv = _LIVE.pop("server", None)
    ref = _LIVE.pop("reference", None)
    if ref is not None and ref[0].poll() is None:
        ref[0].kill()
    return server.stop(srv) if srv is not None else None


# ------------------------------------------------------------------------------- first-generation

def compare_tokens(gpu: List[int], ref: List[int], margins: List[float],
                   near_tie: float = NEAR_TIE) -> Tuple[bool, str]:
    """Greedy GPU tokens against the CPU reference; a divergence only counts after a clear margin."""
    # zip() without strict=: the probe also runs on Pythons older than 3.10
    for i, (got, want) in enumerate(zip(gpu, ref)):  # noqa: B905
        if got != want:
            if margins[i] < near_tie:
                return True, (f"equal for {i} tokens, then a near-tie (CPU margin {margins[i]:.3f} < "
                              f"{near_tie}) went the other way; later tokens not compared")
            return False, (f"GPU token {i} is {got}, the CPU reference chose {want} with a clear margin "
                           f"({margins[i]:.3f}): a kernel computes wrong results")
    if len(gpu) < len(ref):
        return False, f"GPU returned {len(gpu)} tokens, the reference {len(ref)}"
    return True, f"all {len(ref)} tokens equal"


def _output_ids(answer: Dict[str, Any]) -> List[int]:
    if isinstance(answer.get("output_ids"), list):
        return [int(t) for t in answer["output_ids"]]
    logprobs = answer.get("meta_info", {}).get("output_token_logprobs") or []
    return [int(entry[1]) for entry in logprobs]


def _reference() -> Dict[str, Any]:
    proc, path = _LIVE.pop("reference")
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        msg = "the CPU reference decode did not finish in 600s"
        raise core.StageFailed(msg) from None
    with open(path) as fh:
        text = fh.read()
    found = [ln for ln in text.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not found:
        msg = "the CPU reference decode (transformers) failed"
        raise core.StageFailed(msg, log=text)
    result: Dict[str, Any] = json.loads(found[-1])
    return result


def _generate(base: str, evidence: Dict[str, Any]) -> List[int]:
    body = {"text": PROMPT, "return_logprob": True,
            "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}}
    code, text = server.http(base + "/generate", body, timeout=120)
    if code != 200:
        msg = f"POST /generate answered {code}: {text[:300]}"
        raise core.StageFailed(msg, evidence)
    answer = json.loads(text)
    ids = _output_ids(answer)
    meta = answer.get("meta_info", {})
    evidence["generate"] = {"text": answer.get("text"), "output_ids": ids,
                            "prompt_tokens": meta.get("prompt_tokens"),
                            "e2e_latency": meta.get("e2e_latency")}
    if not ids:
        msg = "POST /generate returned no tokens"
        raise core.StageFailed(msg, evidence)
    return ids


def _chat(base: str, evidence: Dict[str, Any]) -> None:
    code, text = server.http(base + "/v1/models", timeout=30)
    model = json.loads(text)["data"][0]["id"] if code == 200 else "default"
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8, "temperature": 0}
    code, text = server.http(base + "/v1/chat/completions", body, timeout=120)
    if code != 200:
        msg = f"POST /v1/chat/completions answered {code}: {text[:300]}"
        raise core.StageFailed(msg, evidence)
    answer = json.loads(text)
    usage = answer.get("usage") or {}
    evidence["chat"] = {"content": answer["choices"][0]["message"].get("content"), "usage": usage}
    if not usage.get("completion_tokens"):
        msg = "/v1/chat/completions generated no tokens"
        raise core.StageFailed(msg, evidence)


@core.stage("first-generation", needs=("server",), gpu=True)
def first_generation(ctx: core.Context) -> Dict[str, Any]:
    srv = _LIVE["server"]
    evidence: Dict[str, Any] = {"server_log": srv.log_path}
    try:
        _generate_and_check(srv, evidence)
        _chat(srv.base_url, evidence)
    except core.StageFailed as exc:
        exc.log = exc.log or server.failure_excerpt(srv)  # the server's side of the failure
        raise
    finally:
        evidence["shutdown"] = _stop_live()
    if not evidence["shutdown"]["clean"]:
        msg = f"unclean shutdown: the server left processes or port {srv.port} behind"
        raise core.StageFailed(msg, evidence)
    return evidence


def _generate_and_check(srv: server.Server, evidence: Dict[str, Any]) -> None:
    ids = _generate(srv.base_url, evidence)
    if "reference" not in _LIVE:
        evidence["reference"] = {"verdict": "no CPU reference for a user model; output checked non-empty"}
        return
    ref = _reference()
    ok, detail = compare_tokens(ids, ref["output_ids"], ref["margins"])
    evidence["reference"] = {"output_ids": ref["output_ids"], "margins": ref["margins"],
                             "prompt_tokens": len(ref["prompt_ids"]), "verdict": detail}
    if not ok:
        msg = f"generation mismatch: {detail}"
        raise core.StageFailed(msg, evidence)
