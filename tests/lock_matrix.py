"""A small matrix.yaml for lock tests: one bookworm base, the given lanes, SGLang versions and toolkits."""

from __future__ import annotations

HEADER = """\
schema: 1
bases:
  bookworm: {debootstrap: {suite: bookworm}, python: "3.11", platform: x86_64-manylinux_2_36}
archs: [sm_100a]
cuda: {cu128: {version: "12.8"}, cu130: {version: "13.0"}}
"""
NONE_TOOLKIT = "  none: {description: pip only}\n"
TK130 = "cuda-toolkit[nvcc,crt,nvvm,cccl,cudart,nvrtc]==13.0.2"
TK128 = "cuda-toolkit[nvcc,cccl,cudart,nvrtc]==12.8.1"


def pip_toolkit(cu130: str = TK130, cu128: str = TK128) -> str:
    return f"""\
  pip:
    description: toolkit from wheels
    pip:
      cu128: ["{cu128}"]
      cu130: ["{cu130}"]
"""


def matrix_text(lanes: str, sglang: str, toolkits: str = "") -> str:
    """`lanes` and `sglang` are YAML list items (two-space indent); `toolkits` entries after `none`."""
    return f"{HEADER}torch_lanes:\n{lanes}\nsglang:\n{sglang}\ntoolkits:\n{NONE_TOOLKIT}{toolkits}"
