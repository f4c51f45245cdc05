"""Rules that refuse silent torch/CUDA drift, applied to what the resolver really picked.

Pure functions over `name -> version` maps (parsed lockfiles), so that they are unit-tested on
recorded resolver output. Each returns human-readable problems naming packages and versions;
an empty list means the resolution keeps the promise of the matrix.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

from ..matrix.schema import TorchLane

# The CUDA toolkit components a toolkit layer must keep on one CUDA major.minor. PyPI names them
# without suffix for CUDA 13 (nvidia-cuda-nvcc) and with `-cu12` for CUDA 12 (nvidia-cuda-nvcc-cu12).
TOOLKIT_COMPONENTS = (
    "nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl",
    "nvidia-cuda-runtime", "nvidia-cuda-nvrtc",
)
# Packages a toolkit layer owns: its lock may override the SGLang layer's versions of these.
TOOLKIT_OWNED = ("cuda-toolkit", *TOOLKIT_COMPONENTS)
RUNTIMES = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12")

# Report keys -> the package names that provide them, first found wins (packages were renamed).
KEY_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "sglang": ("sglang",),
    "sglang-kernel": ("sglang-kernel", "sgl-kernel"),
    "flashinfer": ("flashinfer-python",),
    "deep-gemm": ("sgl-deep-gemm", "deep-gemm"),
    "triton": ("triton",),
    "nvcc": ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc-cu13"),
    "cuda-runtime": RUNTIMES,
}


def component_of(name: str) -> str | None:
    """`nvidia-cuda-nvcc-cu12` -> `nvidia-cuda-nvcc`; None for packages outside the toolkit."""
    for suffix in ("-cu12", "-cu13"):
        name = name.removesuffix(suffix)
    return name if name in TOOLKIT_OWNED else None


def major_minor(version: str) -> str:
    try:
        release = Version(version).release
    except InvalidVersion:
        return version
    return ".".join(str(part) for part in release[:2])


def flavour_of(cuda_version: str) -> str:
    """`13.0.96` -> `cu130`, `12.8.90` -> `cu128` (the name torch wheels use)."""
    return "cu" + major_minor(cuda_version).replace(".", "")


def runtime(pins: Mapping[str, str]) -> tuple[str, str] | None:
    """(package, version) of the CUDA runtime that the resolution installs, if any."""
    return next(((name, pins[name]) for name in RUNTIMES if name in pins), None)


def lane_problems(lane: TorchLane, pins: Mapping[str, str]) -> list[str]:
    """Does the resolved torch layer have the lane's torch version and CUDA flavour?"""
    torch = pins.get("torch")
    if torch is None:
        return ["the resolution contains no torch at all"]
    problems = []
    found = Version(torch)
    if found.public != Version(lane.torch).public:
        problems.append(f"resolved torch {torch}, but the lane declares torch {lane.torch}")
    if found.local and found.local.startswith("cu") and found.local != lane.cuda:
        problems.append(f"resolved torch {torch} is a {found.local} build, but the lane declares {lane.cuda}")
    cuda = runtime(pins)
    if cuda is None:
        problems.append(
            f"torch {torch} pulls no CUDA runtime (nvidia-cuda-runtime*): a CPU-only build? "
            f"The lane declares {lane.cuda} (CUDA {lane.cuda_version})"
        )
    elif major_minor(cuda[1]) != lane.cuda_version:
        problems.append(
            f"torch {torch} comes with the CUDA {major_minor(cuda[1])} runtime ({cuda[0]} {cuda[1]}, "
            f"{flavour_of(cuda[1])}), but the lane declares {lane.cuda} (CUDA {lane.cuda_version})"
        )
    toolkit = pins.get("cuda-toolkit")
    if toolkit and major_minor(toolkit) != lane.cuda_version:
        problems.append(
            f"torch {torch} requires cuda-toolkit {toolkit}, but the lane declares {lane.cuda} "
            f"(CUDA {lane.cuda_version})"
        )
    return problems


def sglang_problems(version: str, lane: TorchLane, pins: Mapping[str, str]) -> list[str]:
    """Is the SGLang layer really this SGLang on the lane's torch (no silent fallback)?"""
    problems = []
    found = pins.get("sglang")
    if found != version:
        problems.append(f"the resolver picked sglang {found or '(none)'} instead of sglang {version}")
    torch = pins.get("torch")
    if torch is None or Version(torch).public != Version(lane.torch).public:
        problems.append(f"the SGLang layer has torch {torch or '(none)'}, the lane has torch {lane.torch}")
    skewed = toolkit_skew(lane, pins)
    if skewed:
        problems.append(skew_message(lane, skewed))
    return problems


def toolkit_skew(lane: TorchLane, pins: Mapping[str, str]) -> list[str]:
    """Toolkit components (as finally installed) whose CUDA major.minor differs from the lane's."""
    return sorted(
        f"{name} {version}"
        for name, version in pins.items()
        if component_of(name) and major_minor(version) != lane.cuda_version
    )


def compiler_constraints(lane: TorchLane) -> list[str]:
    """Constraints that keep the CUDA compiler wheels SGLang's dependencies bring on the lane's CUDA.

    humming-kernels 0.1.10 (sglang 0.5.16) asks for `nvidia-cuda-nvcc` with no version, so the resolver
    takes the newest CUDA 13 compiler (13.5) next to torch's 13.0 runtime; later humming-kernels pins it
    to the toolkit version torch pins, as this does. One coherent compiler in the SGLang layer is also
    one the `pip` toolkit completes instead of installing a second copy over it. On a CUDA 12 lane only
    the `-cu12` names are held: a dependency that asks for an unsuffixed (CUDA 13) compiler there is
    refused by `sglang_problems` with the names of the skewed wheels.
    """
    major = lane.cuda_version.split(".")[0]
    suffixes = ("-cu12",) if major == "12" else ("", f"-cu{major}")
    return [f"{name}{suffix}=={lane.cuda_version}.*" for name in TOOLKIT_COMPONENTS for suffix in suffixes]


def skew_message(lane: TorchLane, skewed: list[str]) -> str:
    return (
        f"toolkit components are not on the lane's CUDA {lane.cuda_version} ({lane.cuda}): "
        + ", ".join(skewed)
    )


def key_versions(pins: Mapping[str, str]) -> dict[str, str]:
    """The versions a report shows for a cell, under stable keys, plus the CUDA flavour found."""
    found: dict[str, str] = {}
    for key, names in KEY_PACKAGES.items():
        name = next((n for n in names if n in pins), None)
        if name:
            found[key] = pins[name]
    cuda = runtime(pins)
    if cuda:
        found["cuda"] = flavour_of(cuda[1])
    return found


def overlay(below: Mapping[str, str], above: Mapping[str, str]) -> dict[str, str]:
    """What is installed after `above` is installed with --no-deps on top of `below`."""
    return {**below, **above}
