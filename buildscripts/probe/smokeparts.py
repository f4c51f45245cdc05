"""The parts of the kernel-smoke stage: one compiled op of each kernel library the image ships, run on the GPU in
a child interpreter of the image's Python and compared with torch (stdlib only; torch and the libraries are
imported in the child).

Every part's child source is the same prelude and the part's own body. The prelude's `launch` waits for the
inputs torch made, launches the op once and waits for it at once (`settle`: synchronise, one torch op, synchronise).
A kernel the GPU cannot run (a library without SASS or PTX for this arch) may return from its launch without an
error: its error then surfaces at some later call, far from the launch and blamed on that call. A synchronise alone
does not catch it when the library does not check its launches (the error waits in the CUDA runtime's last-error
slot, read by the next launch that checks, a torch op's). Waiting this way right after the launch makes it the op's
failure, in the driver's words ("no kernel image is available for execution on the device"), with the library, the
op and the arch named. Outputs start as NaN, so an op that returns without running is caught by the compare even
where no error is raised at all.

A library that is not installed is SKIPPED with that reason, never passed; one that is installed and does not
import fails. Each part's record: library, op, seconds (the launch and its wait, first-call JIT included),
wall_s (the child), outcome (passed, failed, skipped), and its words (error, the driver's `words`, or why it was
skipped).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Dict, Optional, Tuple

PRELUDE = r'''
import importlib, json, math, os, re, sys, time, traceback

# Run from a file: its folder comes first on sys.path, where nothing may stand in for the library under test.
if "__file__" in globals() and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]


def say(**fields):
    print("@@json " + json.dumps({"library": LIBRARY, "op": OP, **fields}), flush=True)


def first_line(exc):
    return (str(exc).strip().splitlines() or [""])[0][:300]


def cuda_words(exc):
    """The error's first line, and CUDA's name for it where the message gives one (torch's does, further down)."""
    name = re.search(r"\bcuda(?:Error|_ERROR_)\w+", str(exc))
    words = first_line(exc)
    return f"{words} ({name.group(0)})" if name and name.group(0) not in words else words


def fail(error, **fields):
    traceback.print_exc(file=sys.stdout)
    say(ok=False, error=error[:600], **fields)
    sys.exit(1)


def need(module):
    """The library under test, imported: one that is installed and does not import fails in its own words."""
    try:
        return importlib.import_module(module)
    except Exception as exc:
        fail(f"{LIBRARY} is installed but does not import: {type(exc).__name__}: {first_line(exc)}")


import torch


def settle():
    """Wait for the GPU, then launch one torch op and wait again. A kernel with no image for this GPU fails at
    its launch, and a library that does not check its launches returns as if it ran: the error waits in the
    CUDA runtime's last-error slot, which a synchronise does not read (seen with sgl_kernel's silu_and_mul
    on an H100), until the next launch that checks, such as any torch op. This one checks, here."""
    torch.cuda.synchronize()
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()


def launch(call):
    """One launch of OP and a wait for it: (what the call returned, seconds of the launch and the wait)."""
    try:
        settle()  # torch's work on the inputs is done: an error after this is OP's own
    except Exception as exc:
        fail(f"torch failed making the inputs of {LIBRARY} op {OP}, before it was launched: "
             f"{type(exc).__name__}: {first_line(exc)}")
    started = time.time()
    try:
        result = call()
        # Without this, an op that cannot run on this GPU says so at some later call, blamed on that call.
        settle()
    except Exception as exc:
        words = cuda_words(exc)
        fail(f"{LIBRARY} op {OP} failed on {ARCH} at its launch or the wait right after it: "
             f"{type(exc).__name__}: {words}", words=words, seconds=round(time.time() - started, 3))
    return result, round(time.time() - started, 3)


def rel_err(got, ref):
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm())


def compare(got, ref, tolerance, seconds, measure=rel_err, **extra):
    """OP's output against torch's reference; the output started as NaN, so one never written is caught."""
    fields = dict(seconds=seconds, tolerance=tolerance, **extra)
    if bool(torch.isnan(got).all()):
        say(ok=False, error=f"{LIBRARY} op {OP} computed a wrong result (compared with torch) on {ARCH}: its output "
                            "was never written, so its kernel did not run, though neither its launch nor the "
                            "wait after it raised an error", **fields)
        sys.exit(1)
    err = measure(got, ref)
    ok = err <= tolerance  # NaN compares false
    fields.update(ok=ok, error_measure=err if math.isfinite(err) else str(err))  # no NaN in a record
    if not ok:
        fields["error"] = (f"{LIBRARY} op {OP} computed a wrong result (compared with torch) on {ARCH}: "
                           f"error {err:.3g} > tolerance {tolerance}")
    say(**fields)
'''

TORCH_EXTENSION = r"""
from torch.utils.cpp_extension import load_inline
CUDA = '''
__global__ void axpy_kernel(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
    auto out = torch::full_like(x, std::numeric_limits<float>::quiet_NaN());
    int n = x.numel();
    axpy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                          out.data_ptr<float>(), (float)a, n);
    return out;
}
'''
t = time.time()
ext = load_inline(name="probe_axpy",
                  cpp_sources="torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a);",
                  cuda_sources=CUDA, functions=["axpy"], extra_cuda_cflags=["-O2"], verbose=False)
built = round(time.time() - t, 1)
x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
out, seconds = launch(lambda: ext.axpy(x, y, 3.0))
compare(out, 3.0 * x + y, 1e-5, seconds, build_s=built)
"""

FLASHINFER = r"""
flashinfer = need("flashinfer")
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
out = torch.full_like(x, float("nan"))
_, seconds = launch(lambda: flashinfer.norm.rmsnorm(x, w, eps=1e-6, out=out))
xf = x.float()
ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
compare(out, ref, 1e-2, seconds, version=getattr(flashinfer, "__version__", None))
"""

DEEP_GEMM = r"""
deep_gemm = need("deep_gemm")
m, n, k = 256, 512, 1024
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
_, seconds = launch(lambda: deep_gemm.bf16_gemm_nt(a, b, d))


def gemm_diff(got, ref):  # DeepGEMM's own measure (deep_gemm.testing.calc_diff)
    got = got.double()
    return float(1 - 2 * (got * ref).sum() / (got.square().sum() + ref.square().sum()))


compare(d, a.double() @ b.double().T, 1e-3, seconds, measure=gemm_diff, shape=[m, n, k])
"""

# The compiled op, called as torch registers it: sgl_kernel.silu_and_mul is a thin wrapper over it in every
# sgl-kernel / sglang-kernel of the matrix (0.4.1, 0.4.5, 0.4.10), while sgl_kernel.rmsnorm hands over to
# FlashInfer when that is installed. Importing sgl_kernel loads the common_ops library for this GPU (sm90/ or
# sm100/ since 0.4).
SGL_KERNEL = r"""
sgl_kernel = need("sgl_kernel")
try:
    torch.ops.sgl_kernel.silu_and_mul.default
except Exception as exc:
    fail(f"sgl_kernel registers no compiled op sgl_kernel::silu_and_mul: {type(exc).__name__}: {first_line(exc)}")
x = torch.randn(64, 2 * 4096, device="cuda", dtype=torch.bfloat16)
out = torch.full((64, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
_, seconds = launch(lambda: torch.ops.sgl_kernel.silu_and_mul.default(out, x))
ref = torch.nn.functional.silu(x[:, :4096].float()) * x[:, 4096:].float()
compare(out, ref, 1e-2, seconds, version=getattr(sgl_kernel, "__version__", None),
        ops_library=getattr(getattr(sgl_kernel, "common_ops", None), "__file__", None))
"""

# Run from a file: @triton.jit reads its kernel's source. Compiled at its first launch, for this GPU.
TRITON = r"""
triton = need("triton")
import triton.language as tl


@triton.jit
def probe_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


n = 1 << 20
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
out = torch.full_like(x, float("nan"))
_, seconds = launch(lambda: probe_add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024))
compare(out, x + y, 1e-6, seconds, version=getattr(triton, "__version__", None))
"""


@dataclass(frozen=True)
class Part:
    key: str                          # the part's name in the stage's evidence, and the library in its words
    module: str                       # what the child imports
    distributions: Tuple[str, ...]    # the names it is installed under (the first found gives the version)
    op: str                           # the op launched
    body: str                         # the child's code after the prelude
    majors: Tuple[int, ...] = ()      # GPU majors the library has kernels for; () for all
    jit_name: str = ""                # its name in jitlog.DEBUG_ENV when it JIT-compiles ("" if it has none)


PARTS = (
    Part("torch-extension", "torch", ("torch",), "axpy", TORCH_EXTENSION, jit_name="torch extension"),
    Part("flashinfer", "flashinfer", ("flashinfer-python", "flashinfer"), "norm.rmsnorm", FLASHINFER,
         jit_name="flashinfer"),
    # DeepGEMM has kernels for sm_90 and sm_100 only (not sm_120, not older).
    Part("deep_gemm", "deep_gemm", ("sgl-deep-gemm", "deep-gemm", "deep_gemm", "sglang-kernel", "sgl-kernel"),
         "bf16_gemm_nt", DEEP_GEMM, majors=(9, 10), jit_name="deep_gemm"),
    Part("sgl_kernel", "sgl_kernel", ("sglang-kernel", "sgl-kernel"), "silu_and_mul", SGL_KERNEL),
    Part("triton", "triton", ("triton",), "probe_add", TRITON),
)


def source(part: Part, gpu: Dict[str, Any]) -> str:
    """The child's whole Python source for `part` on `gpu` (run from a file: Triton reads its kernel's source)."""
    where = f"{gpu.get('arch') or 'this GPU'}" + (f" ({gpu['name']})" if gpu.get("name") else "")
    head = f"LIBRARY = {json.dumps(part.key)}\nOP = {json.dumps(part.op)}\nARCH = {json.dumps(where)}\n"
    return head + PRELUDE + part.body


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version(part: Part) -> Optional[str]:
    """`DIST VERSION` of the distribution that installed the part's module (the first of its known
    distributions that is installed, where Python < 3.10 has no index of top-level names)."""
    index = getattr(metadata, "packages_distributions", None)
    owners = list(index().get(part.module, [])) if index else []
    for name in dict.fromkeys([*owners, *part.distributions]):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def skip_reason(part: Part, gpu: Dict[str, Any]) -> Optional[str]:
    """Why `part` cannot run here (not installed, no kernels for this GPU's major), or None."""
    if not installed(part.module):
        return (f"{part.key} is not installed (no module {part.module}; distributions looked for: "
                f"{', '.join(part.distributions)})")
    major = int(str(gpu.get("capability", "0.0")).split(".")[0])
    if part.majors and major not in part.majors:
        archs = " and ".join(f"sm_{m}0" for m in part.majors)
        return f"{part.key} has no kernels for {gpu.get('arch')} (it has {archs} only)"
    return None


def skipped(part: Part, reason: str) -> Dict[str, Any]:
    return {"library": part.key, "op": part.op, "ok": None, "outcome": "skipped", "skipped": reason}
