"""What the code under test is handed of the verifier's environment (an allow-list), wherever it runs: on this
machine's Python (verify/host.py) or inside an LXC container, where `pct exec` passes the caller's environment on
to the first program it starts (lxc/target.py).

A module of its own, below both, so that the LXC room need not reach up into verification for it.
"""

from __future__ import annotations

from collections.abc import Mapping

# What the code under test is handed of the verifier's environment: only what a CUDA, PyTorch or SGLang program
# reads to find its toolkit, its GPUs and its caches (an allow-list: a secret's name need not say it is one,
# `MYSQL_PWD`, a token inside `PIP_INDEX_URL`), and of those never a name that says it holds a secret.
HANDED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
                          "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS",
                          "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "HF_HUB_OFFLINE",
                          "TRANSFORMERS_OFFLINE", "SGLANG_IMAGES_FATBIN_REPORTS", "SGLANG_IMAGES_WARM_REPORT",
                          "SGLANG_IMAGES_VERIFICATION"})
HANDED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "NVCC_", "CUBLAS", "CUDNN_", "TORCH_", "PYTORCH_",
                   "TORCHINDUCTOR_", "TRITON_", "FLASHINFER_", "SGLANG_", "SGL_", "DG_", "TVM_FFI_", "UCX_")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSW", "PWD", "PASS", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "JWT",
                "DSN", "URL", "URI")


def handed_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of `env` the code under test may see (HANDED_NAMES and HANDED_PREFIXES, less any name that says
    it holds a secret, and less the project's own settings but the few the probe reads)."""
    return {name: value for name, value in env.items() if _handed(name)}


def _handed(name: str) -> bool:
    if name in HANDED_NAMES:
        return True
    upper = name.upper()
    if name.startswith("SGLANG_IMAGES_") or any(word in upper for word in SECRET_WORDS):
        return False
    return name.startswith(HANDED_PREFIXES)
