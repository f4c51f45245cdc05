"""Look one level below before naming a cause (issue 49): a line that only reports a failure of something under it
names no cause, and the diagnosis says what was seen; the cause is named from its own words when the log carries
them, and from what the probe looked up (ldd of the module, the contents of the CUDA home).

The wrong diagnoses of a held-out scoring had one shape: the classifier matched a line it knows while the cause was
elsewhere (sgl_kernel's "Could not load any common_ops library" over a system library that was not installed; a
CUDA home that is a folder without the toolkit). Each wrapper here is tried with different causes under it; the
texts are cut from public reports (source beside each) or are the words of the wrapper's own code with a loader's
error from a report under them, as the two are printed together.
"""

from __future__ import annotations

import pytest

from buildscripts.verify import classify

CRITICAL = "ImportError: \n[sgl_kernel] CRITICAL: Could not load any common_ops library!\n"
ATTEMPTS = ("Attempted locations:\n1. Architecture-specific pattern: /usr/local/lib/python3.12/dist-packages/"
            "sgl_kernel/sm90/common_ops.* - found files: ['/usr/local/lib/python3.12/dist-packages/sgl_kernel/sm90/"
            "common_ops.abi3.so']\nGPU Info:\n- Compute capability: 90\nError details from previous import attempts:\n")

UNDER_A_WRAPPER = [
    # sgl_kernel's wrapper over four different causes (its format: sgl-kernel/python/sgl_kernel/load_utils.py)
    ("sgl-kernel-torch-abi-undefined-symbol", "import",
     CRITICAL + ATTEMPTS + "- ImportError: /usr/local/lib/python3.10/dist-packages/sgl_kernel/sm100/common_ops.abi3"
     ".so: undefined symbol: _ZNK3c106SymInt6sym_neERKS0_\n- ModuleNotFoundError: No module named 'common_ops'",
     "https://github.com/sgl-project/sglang/pull/13948"),
    ("shared-library-missing", "import",
     CRITICAL + ATTEMPTS + "- ImportError: libnuma.so.1: cannot open shared object file: No such file or directory\n"
     "- ModuleNotFoundError: No module named 'common_ops'",
     "load_utils.py's format; the loader's words of https://github.com/ganehag/pve-vma-docker/pull/4"),
    ("sgl-kernel-cu12-wheel-on-cu13-stack", "server",
     CRITICAL + "GPU Info:\n- Compute capability: 121\n- CUDA version: 13.0\nError details from previous import "
     "attempts:\n- OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "https://github.com/sgl-project/sglang/issues/18203"),
    ("libnvrtc-so12-missing", "import",
     CRITICAL + "Error details from previous import attempts:\n- ImportError: libnvrtc.so.12: cannot open shared "
     "object file: No such file or directory\ntorch 2.8.0+cu128",
     "https://github.com/sgl-project/sglang/issues/10951"),
    # SGLang's capture wrapper over what failed during capture
    ("cuda-graph-capture-failed", "server",
     "Exception: Capture cuda graph failed: RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA "
     "graph capture. If you need this call to be captured, please file an issue.",
     "https://github.com/sgl-project/sglang/issues/7918"),
    ("cuda-graph-capture-oom", "server",
     "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.",
     "https://github.com/sgl-project/sglang/issues/5285"),
    ("triton-shared-memory-exceeded", "server",
     '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 275, in capture\n'
     "    raise OutOfResources(self.metadata.shared, max_shared, \"shared memory\")\n"
     "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 65536. "
     "Reducing block sizes or `num_stages` may help.",
     "https://github.com/sgl-project/sglang/issues/2384"),
    ("sgl-kernel-no-sm120-rmsnorm", "server",
     "Exception: Capture cuda graph failed: RMSNorm failed with error code no kernel image is available for execution "
     "on the device",
     "https://github.com/sgl-project/sglang/issues/7249"),
    # torch.compile's wrapper over what its backend raised
    ("triton-shared-memory-exceeded", "server",
     "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nOutOfResources: out of resource: shared "
     "memory, Required: 81920, Hardware limit: 65536. Reducing block sizes or `num_stages` may help.",
     "https://github.com/pytorch/pytorch/issues/139755"),
    ("torch-compile-needs-compiler-at-runtime", "server",
     "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nInvalidCxxCompiler: No working C++ compiler "
     "found in torch._inductor.config.cpp.cxx: (None, 'g++')",
     "https://github.com/pytorch/pytorch/issues/167839"),
    # the piecewise CUDA graph's wrapper over what failed in it
    ("cuda-out-of-memory", "server",
     "Piecewise CUDA Graph failed with error: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 79.19 GiB of which 1.02 GiB is free.\nPiecewise CUDA Graph is enabled by default as an experimental "
     "feature.\nTo work around this error, add --disable-piecewise-cuda-graph to your launch command.",
     "SGLang's piecewise wrapper (https://github.com/sgl-project/sglang/pull/27811) over an OOM"),
]


@pytest.mark.parametrize(("expected", "stage", "text", "source"), UNDER_A_WRAPPER,
                         ids=[f"{e}:{i}" for i, (e, _, _, _) in enumerate(UNDER_A_WRAPPER)])
def test_the_cause_under_a_wrapper_is_named(expected: str, stage: str, text: str, source: str) -> None:
    assert classify.classify(text, stage).id == expected, source


SEEN_NOT_CAUSE = [
    # the wrapper alone: it is said for every cause, so the diagnosis says what was seen
    ("sgl-kernel-common-ops-not-loaded", "[sgl_kernel] CRITICAL: Could not load any common_ops library!", None,
     "https://github.com/sgl-project/sglang/issues/29646"),
    ("cuda-graph-capture-error",
     "Exception: Capture cuda graph failed: CUDA error: an illegal memory access was encountered\nPossible solutions:\n"
     "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
     "CUDA error: an illegal memory access was encountered", "SGLang's capture wrapper over a kernel error"),
    ("piecewise-cuda-graph-failure",
     "[2026-06-10 13:08:34 TP7] Piecewise CUDA Graph failed with error: 'TcPiecewiseForwardContext' object has no "
     "attribute 'num_tokens'\nPiecewise CUDA Graph is enabled by default as an experimental feature.\nTo work around "
     "this error, add --disable-piecewise-cuda-graph to your launch command.",
     "TcPiecewiseForwardContext' object has no attribute 'num_tokens", "https://github.com/sgl-project/sglang/pull/27811"),
    ("piecewise-cuda-graph-failure",
     "SGLang crashes during piecewise CUDA graph warmup (`CUBLAS_STATUS_EXECUTION_FAILED` in "
     "`piecewise_cuda_graph_runner.warmup_compile`)", None, "https://github.com/ai-dynamo/dynamo/pull/8609"),
    ("torch-compile-failed",
     "W1024 01:17:10.936000 140404233111360 torch/_dynamo/convert_frame.py:1009] torch._dynamo.exc."
     "BackendCompilerFailed: backend='inductor' raised:\n[01:17:10.938]: W1024 01:17:10.936000 140404233111360 "
     "torch/_dynamo/convert_frame.py:1009] NameError: name 's4' is not defined",
     "NameError: name 's4' is not defined", "https://github.com/unslothai/unsloth/issues/1175"),
]


@pytest.mark.parametrize(("expected", "text", "below", "source"), SEEN_NOT_CAUSE,
                         ids=[f"{e}:{i}" for i, (e, _, _, _) in enumerate(SEEN_NOT_CAUSE)])
def test_a_wrapper_alone_says_what_was_seen_and_names_no_cause(expected: str, text: str, below: str | None,
                                                               source: str) -> None:
    match = classify.classify(text, "server")
    assert match.id == expected, source
    entry = classify.load().get(expected)
    assert entry is not None and entry.generic   # it yields to any class that names a cause
    if below:
        assert below in match.hint, match.hint


def test_the_wrapper_hints_name_no_fix_of_a_cause_they_did_not_see() -> None:
    bare = classify.classify("[sgl_kernel] CRITICAL: Could not load any common_ops library!", "import").hint
    assert "cu130" not in bare and "Install the sglang-kernel" not in bare   # the old hint's cause, not seen here
    capture = classify.classify("Capture cuda graph failed: CUDA error: an illegal memory access", "server").hint
    assert "cannot be captured ran" not in capture   # the old hint claimed an uncapturable op
    compiled = classify.classify("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
                                 "AssertionError: x", "server")
    assert compiled.id == "torch-compile-failed" and "gcc" not in compiled.hint


def test_the_loaders_error_is_carried_into_the_wrappers_hint() -> None:
    text = CRITICAL + ATTEMPTS + "- ImportError: /x/sgl_kernel/sm90/common_ops.abi3.so: cannot enable executable stack"
    match = classify.classify(text, "import")
    assert match.id == "sgl-kernel-common-ops-not-loaded"
    assert "the loader's own error under it says what: ImportError: /x/sgl_kernel/sm90/common_ops.abi3.so: cannot " \
           "enable executable stack" in match.hint


# ----------------------------------------------------------------------------------- what the probe looked up

@pytest.mark.parametrize(("reason", "expected", "named"), [
    # the import stage's reason with ldd's finding (buildscripts/probe/loaderfacts.py)
    ("sgl_kernel: - ModuleNotFoundError: No module named 'common_ops' (ldd: libnuma.so.1 => not found "
     "(sgl_kernel/sm90/common_ops.abi3.so))", "shared-library-missing", "libnuma1"),
    # without a GPU the driver's library is missing too; the library no driver brings is what fails the image
    ("sgl_kernel: ImportError: libcuda.so.1: cannot open shared object file: No such file or directory (ldd: "
     "libcuda.so.1 => not found (sgl_kernel/sm90/common_ops.abi3.so); libibverbs.so.1 => not found "
     "(sgl_kernel/sm90/common_ops.abi3.so))", "shared-library-missing", "libibverbs.so.1"),
    # the toolchain stage's reason for a CUDA home that is a runtime only (evidence/h200-2026-11-29/probe/b-no-nvcc)
    ("the CUDA home /usr/local/cuda (found via /usr/local/cuda exists) has no bin/nvcc; it holds compat, lib64, "
     "targets", "cuda-home-without-toolkit", "it holds compat, lib64, targets"),
    ("the CUDA home /opt/cuda-12.9 (found via $CUDA_HOME) does not exist: no bin/nvcc there",
     "cuda-home-without-toolkit", "/opt/cuda-12.9 (found via $CUDA_HOME)"),
    # nothing points at a toolkit at all: that is the other class
    ("CUDA toolkit not discoverable: CUDA_HOME and CUDA_PATH unset, no nvcc on PATH, no /usr/local/cuda",
     "cuda-home-missing", "CUDA_HOME"),
])
def test_the_probes_facts_name_the_cause(reason: str, expected: str, named: str) -> None:
    match = classify.classify(reason, "toolchain" if "CUDA" in reason else "import")
    assert match.id == expected
    assert named in match.hint, match.hint


@pytest.mark.parametrize(("text", "expected", "source"), [
    ("FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'", "cuda-home-without-toolkit",
     "https://github.com/lenML/Speech-AI-Forge/issues/258"),
    ("error: no such directory or file: /usr/local/cuda-8.0/bin/nvcc\n"
     "[Errno 2] No such file or directory: '/usr/local/cuda-8.0/bin/nvcc'", "cuda-home-without-toolkit",
     "https://github.com/jwyang/faster-rcnn.pytorch/issues/631"),
    # a CUDA_HOME written like PATH is its own class, never "no toolkit there"
    ("FileNotFoundError: [Errno 2] No such file or directory: ':/usr/local/cuda/bin/nvcc'",
     "flashinfer-malformed-cuda-home",
     "https://github.com/NVIDIA/apex/issues/1700"),
    ("error: [Errno 2] No such file or directory: '/usr/local/cuda-11.8:/bin/nvcc'", "flashinfer-malformed-cuda-home",
     "https://github.com/IDEA-Research/GroundingDINO/issues/165"),
])
def test_a_cuda_home_without_nvcc_is_told_from_one_written_like_path(text: str, expected: str, source: str) -> None:
    assert classify.classify(text, "jit-compile").id == expected, source


NOT_THE_CAUSE = [
    # a CUDA home whose nvcc is there but does not run is not "no CUDA home" (whatever nvcc printed says why)
    ("nvcc at /usr/local/cuda/bin/nvcc does not run (found via $CUDA_HOME)", "cuda-home-missing"),
    ("nvcc at /usr/local/cuda/bin/nvcc does not run (found via $CUDA_HOME)", "cuda-home-without-toolkit"),
    # torch seeing no GPU is not the fabric manager's error 802 (a CPU torch, no device passed ...)
    ("RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.",
     "cuda-error-802-no-accelerator"),
    # the driver's own libraries and torch's are not system libraries to install
    ("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory", "shared-library-missing"),
    ("OSError: libnvidia-ml.so.1: cannot open shared object file: No such file or directory", "shared-library-missing"),
    ("ImportError: libc10.so: cannot open shared object file: No such file or directory", "shared-library-missing"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "shared-library-missing"),
]


@pytest.mark.parametrize(("text", "not_this"), NOT_THE_CAUSE,
                         ids=[f"{n}:{i}" for i, (_, n) in enumerate(NOT_THE_CAUSE)])
def test_a_line_whose_cause_is_elsewhere_is_not_given_that_cause(text: str, not_this: str) -> None:
    assert classify.classify(text, "import").id != not_this

