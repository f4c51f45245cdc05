"""The families a held-out scoring found unknown (issue 34), each recognised by its own words: an old GPU's arch
dropped by a build, an extension with no code for the GPU, a loader asking for one exact CUDA library name, a
CUDA library header missing, an optional backend package not installed, a hub kernel fetched while offline, JIT
caches not kept between starts, a collective failing with a bare "invalid argument", NCCL without a socket
interface; and this project's own words for a loopback that is down and GPU nodes that cannot be opened.

Each positive is text as printed in a public report (the source beside it), cut to the lines that matter; the
negatives are nearby texts that must not be taken for the family: no wrong class is worth a recognised one.
"""

from __future__ import annotations

import pytest

from buildscripts.verify import classify

RECOGNISED = [
    # an older arch dropped by the installed build
    ("gpu-arch-dropped", "gpu-visible",
     "Found GPU0 NVIDIA GTX TITAN Black which is of cuda capability 3.5. PyTorch no longer supports this GPU because "
     "it is too old. The minimum cuda capability supported by this library is 3.7.",
     "https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/3003"),
    ("gpu-arch-dropped", "first-generation",
     "    Found GPU0 GeForce GTX 660 Ti which is of cuda capability 3.0.\n"
     "    PyTorch no longer supports this GPU because it is too old.\n"
     "    The minimum cuda capability that we support is 3.5.\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "https://github.com/alievk/avatarify-python/issues/58"),
    # an extension built for other archs than the GPU's
    ("per-op-arch-gap-no-kernel-image", "first-generation",
     "print(torch.cuda.get_device_capability(0))\n# (6, 1)\ntorch.rand(2, 2).cuda().sum()\n"
     "# RuntimeError: CUDA error: invalid device function",
     "https://github.com/pytorch/pytorch/issues/13207"),
    ("per-op-arch-gap-no-kernel-image", "server",
     "CUDA Error:\n    File:       TensorRT-YOLO/source/deploy/vision/inference.cpp\n    Line:       558\n"
     "    Error code: 98\n    Error text: invalid device function",
     "https://github.com/laugh12321/TensorRT-YOLO/issues/74"),
    # a loader that asks for one exact CUDA library file
    ("cuda-runtime-so-missing", "server",
     "INFO 04-24 06:02:06 api_server.py:151] vLLM API server version 0.4.1\n"
     "Failed to import NCCL library: Cannot find libnccl.so.2 in the system.",
     "https://github.com/vllm-project/vllm/issues/4312"),
    ("cuda-runtime-so-missing", "import",
     '  File "/home/usr/pinokio/api/storydiffusion-comics.git/app/env/lib/python3.10/site-packages/torch/__init__.py", '
     "line 290, in <module>\n    from torch._C import *  # noqa: F403\n"
     "ImportError: libnccl.so.2: cannot open shared object file: No such file or directory",
     "https://github.com/pinokiocomputer/pinokio/issues/193"),
    ("cuda-runtime-so-missing", "import",
     '  File "/app/server/projects/pulid/venv/lib/python3.10/site-packages/llama_cpp/_ctypes_extensions.py", '
     "line 82, in load_shared_library\n    return ctypes.CDLL(str(lib_path), **cdll_args)\n"
     "OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "https://github.com/JamePeng/llama-cpp-python/issues/52"),
    # an optional CUDA package of a backend not installed
    ("optional-backend-missing", "server",
     '  File "/usr/local/python/lib/python3.10/site-packages/sglang/srt/model_executor/model_runner.py", line 28, in '
     "<module>\n    from flashinfer import (\nModuleNotFoundError: No module named 'flashinfer'",
     "https://github.com/sgl-project/sglang/issues/945"),
    ("optional-backend-missing", "server",
     "    raise ImportError(\n        \"flash-attention library is required. Please install it with: \"\n"
     "        \"pip install flash-attn --no-build-isolation\"",
     "https://github.com/sgl-project/sglang/pull/16000"),
    # a hub kernel fetched while offline
    ("hub-kernel-offline", "server",
     "With `HF_HUB_OFFLINE` = 1\nfrom kernels import get_kernel\n"
     'get_kernel("kernels-community/finegrained-fp8", revision="b0b199bf716f33c14bb7a3ea9ca86b87e5635906")\n'
     "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/"
     "kernels-community/finegrained-fp8/tree/b0b199bf: offline mode is enabled.",
     "https://github.com/huggingface/kernels/issues/553"),
    # JIT caches not kept between starts
    ("jit-cache-not-kept", "server",
     "Running the same torch.compile(backend=\"tt\") workload three times in separate podman run --rm containers still "
     "yields three full cold compiles. Each run logs JIT cache stats: 0/184 hits (0.0%)",
     "https://github.com/tenstorrent/tt-metal/issues/44258"),
    ("jit-cache-not-kept", "server",
     "vLLM stores Torch compile cache in ~/.cache/vllm/torch_compile_cache, but it is not persisted in containers, "
     "causing recompilation and slow startup on every restart.",
     "https://github.com/gpustack/gpustack/issues/5175"),
    # a collective failing with a bare "invalid argument"
    ("nccl-invalid-argument", "nccl-allreduce",
     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, invalid "
     "argument, NCCL version 2.14.3\nncclInvalidArgument: Invalid value for an argument.\nLast error:\n"
     "Invalid config blocking attribute value -2147483648",
     "https://github.com/SpursGoZmy/Table-LLaVA/issues/4"),
    ("nccl-invalid-argument", "nccl-allreduce",
     "YYY:2396:2428 [0] misc/argcheck.cc:40 NCCL WARN Reduce : invalid root 0 (root should be in the 0..0 range)\n"
     "terminate called after throwing an instance of 'std::runtime_error'\n  what():  NCCL Error 4: invalid argument",
     "https://github.com/NVIDIA/nccl/issues/276"),
    # NCCL with no interface to bootstrap over
    ("nccl-no-socket-interface", "nccl-allreduce",
     "    work = default_pg.barrier(opts=opts)\nRuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "ProcessGroupNCCL.cpp:1201, internal error, NCCL version 2.14.3\nncclInternalError: Internal check failed.\n"
     "Last error:\nBootstrap : no socket interface found",
     "https://github.com/EasonXiao-888/MambaTree/issues/14"),
    # a CUDA library header missing when code is compiled
    ("deepgemm-jit-include-path", "jit-compile",
     "/sgl-workspace/DeepEP/csrc/kernels/configs.cuh:62:10: fatal error: nvshmem.h: No such file or directory\n"
     "   62 | #include <nvshmem.h>",
     "https://github.com/ishandhanani/srt-slurm/pull/242"),
]


@pytest.mark.parametrize(("expected", "stage", "text", "source"), RECOGNISED,
                         ids=[f"{e}:{s.rsplit('/', 3)[-3] if '/' in s else s[:12]}" for e, _, _, s in RECOGNISED])
def test_a_report_of_the_family_is_recognised(expected: str, stage: str, text: str, source: str) -> None:
    assert classify.classify(text, stage).id == expected, source


@pytest.mark.parametrize(("text", "named"), [
    ("Found GPU0 NVIDIA GTX TITAN Black which is of cuda capability 3.5. PyTorch no longer supports this GPU because "
     "it is too old. The minimum cuda capability supported by this library is 3.7.", "capability 3.5"),
    ("Failed to import NCCL library: Cannot find libnccl.so.2 in the system.", "libnccl.so.2"),
    ("ModuleNotFoundError: No module named 'flashinfer'", "needs flashinfer"),
    ("ncclInvalidArgument: Invalid value for an argument.\nLast error:\nBroadcast : sendbuff (nil) is not a valid "
     "pointer", "Broadcast : sendbuff (nil) is not a valid pointer"),
])
def test_the_hint_names_what_the_report_showed(text: str, named: str) -> None:
    assert named in classify.classify(text, "server").hint


NOT_THE_FAMILY = [
    # a vLLM warning that falls back to another backend is no failure of a missing package
    ("INFO 08-02 13:58:45 selector.py:158] Cannot use FlashAttention-2 backend because the vllm_flash_attn package is "
     "not found. `pip install vllm-flash-attn` for better performance.\nINFO 08-02 13:58:45 selector.py:51] Using "
     "XFormers backend.", "optional-backend-missing"),
    # torch or sglang missing is the wrong image, not an optional backend
    ("ModuleNotFoundError: No module named 'torch'", "optional-backend-missing"),
    # a module missing inside an installed package is a version that does not fit, not a package not installed
    ("ModuleNotFoundError: No module named 'flashinfer.jit.attention'", "optional-backend-missing"),
    # a CUDA call inside NCCL failing is NCCL's setup (nccl-init-failed), not its argument checks
    ("NCCL WARN Cuda failure 1 'invalid argument'\nRuntimeError: NCCL Error 1: unhandled cuda error (run with "
     "NCCL_DEBUG=INFO for details)", "nccl-invalid-argument"),
    # a CUDA invalid argument with no collective in sight
    ("RuntimeError: CUDA error: invalid argument\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
     "nccl-invalid-argument"),
    # the driver's own library is not a CUDA runtime library of a wheel
    ("OSError: libnvidia-ml.so.1: cannot open shared object file: No such file or directory",
     "cuda-runtime-so-missing"),
    # a download failing with no hub kernel loader in sight is a plain download failure
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded "
     "with url: /Qwen/Qwen2.5-7B/resolve/main/config.json", "hub-kernel-offline"),
    # a cache that is kept and reused
    ("flashinfer.jit: Loading JIT ops: batch_prefill_with_kv_cache_dtype_q_bf16 (cached)", "jit-cache-not-kept"),
    # NCCL choosing an interface is no failure
    ("NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\nNCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
     "nccl-no-socket-interface"),
    # a GPU of a supported capability that torch has no kernels for is not a dropped arch
    ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
     "gpu-arch-dropped"),
    # a denied /dev/urandom is the standard nodes' class, never the GPU nodes'
    ("cannot open /dev/urandom: Permission denied", "gpu-node-permission"),
]


@pytest.mark.parametrize(("text", "not_this"), NOT_THE_FAMILY, ids=[n for _, n in NOT_THE_FAMILY])
def test_a_nearby_text_is_not_taken_for_the_family(text: str, not_this: str) -> None:
    assert classify.classify(text, "server").id != not_this


def test_a_loopback_that_is_down_beats_what_nccl_says_about_it() -> None:
    text = ("NCCL all-reduce across 1 GPU(s) failed: rank 0: DistBackendError: NCCL error; the loopback interface (lo) "
            "is down where the ranks ran\nbootstrap.cc:85 NCCL WARN Bootstrap : no socket interface found")
    assert classify.classify(text, "nccl-allreduce").id == "no-loopback"


def test_gpu_nodes_refused_by_their_mode_are_not_sent_to_dockers_advice() -> None:
    text = ("torch sees no usable GPU: RuntimeError: No CUDA GPUs are available; /dev/nvidia0 (mode 0660, owner "
            "65534:65534), /dev/nvidiactl (mode 0660, owner 65534:65534) cannot be opened for reading and writing "
            "here\nnvidia-smi: Failed to initialize NVML: Insufficient Permissions")
    match = classify.classify(text, "gpu-visible")
    assert match.id == "gpu-node-permission"
    assert "/dev/nvidia0 (mode 0660)" in match.hint and "NVreg_DeviceFileMode=0666" in match.hint
