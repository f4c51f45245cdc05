"""Version-coupled packages: what must move together, read from the installed distributions' metadata.

- FlashInfer's three packages (flashinfer-python, flashinfer-cubin, flashinfer-jit-cache) are one release:
  the cubins and the AOT modules are built for that flashinfer-python, which refuses others at import
  unless FLASHINFER_DISABLE_VERSION_CHECK is set (flashinfer-ai/flashinfer#4337). A `pip install` of one
  of them inside a container is how they drift apart.
- sgl-kernel (published as sglang-kernel since 0.4) is a C++ extension built against one torch: with
  another it fails to load with `undefined symbol: _ZN3c10...`, a failure easily read as a missing arch
  (sgl-project/sglang#30562). Which torch it was built for comes from its own `torch==` requirement, else
  from a torch version its version's local label names, else from the SGLang release that pins both it
  and torch (SGLang releases its kernel against the torch it pins).
Pure functions of metadata (unit-tested); `check()` reads the image's (standard library only).
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any, Dict, Iterable, List, Optional, Tuple

FLASHINFER = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
KERNELS = ("sglang-kernel", "sgl-kernel")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?\s*==\s*([^\s,;)]+)\s*\)?\s*(;.*)?$")
_LOCAL_TORCH = re.compile(r"torch[-_.]?(\d+(?:\.\d+)+)")


def name_of(name: str) -> str:
    """PEP 503 normal form: `Flashinfer_Python` -> `flashinfer-python`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """`0.6.18+cu130` -> `0.6.18` (a local label names a build, not another release)."""
    return version.split("+", 1)[0]


def pins(requirements: Iterable[str]) -> Dict[str, str]:
    """name -> version of every exact `==` requirement that applies whatever extras are asked for."""
    found = {}
    for line in requirements:
        match = _PIN.match(line)
        if match and "extra" not in (match.group(3) or ""):
            found[name_of(match.group(1))] = match.group(2)
    return found


def pinned_matches(pin: str, version: str) -> bool:
    """`2.9.1` pins `2.9.1+cu128`; `2.9.*` pins any 2.9."""
    if pin.endswith(".*"):
        return (public(version) + ".").startswith(pin[:-1])
    return public(pin) == public(version)


def flashinfer_problems(versions: Dict[str, str]) -> List[str]:
    """Each FlashInfer package whose release differs from flashinfer-python's (or the first present)."""
    present = [(n, versions[n]) for n in FLASHINFER if n in versions]
    if len(present) < 2:
        return []
    ref_name, ref = present[0]
    # The wording of flashinfer's own import check, so both read (and classify) the same.
    return [f"{name} version ({version}) does not match flashinfer version ({ref}, {ref_name})"
            for name, version in present[1:] if public(version) != public(ref)]


def kernel_torch(kernel: Tuple[str, str], kernel_requires: Iterable[str], sglang: Optional[Tuple[str, str]],
                 sglang_requires: Iterable[str]) -> Tuple[Optional[str], str, List[str]]:
    """(torch version the kernel was built for or None, how that is known, problems) for kernel = (name,
    version) and the SGLang (name, version) installed beside it."""
    name, version = kernel
    own = pins(kernel_requires).get("torch")
    if own:
        return own, f"{name} {version} requires torch=={own}", []
    local = _LOCAL_TORCH.search(version.partition("+")[2])
    if local:
        return local.group(1), f"its version {version} names torch {local.group(1)}", []
    if sglang is None:
        return None, f"{name} {version} declares no torch, and no SGLang pins it", []
    release = pins(sglang_requires)
    pinned = next((release[k] for k in KERNELS if k in release), None)
    if pinned is None:
        return None, f"{name} {version} declares no torch, and {sglang[0]} {sglang[1]} does not pin it", []
    if not pinned_matches(pinned, version):
        return None, "", [f"{sglang[0]} {sglang[1]} pins {name}=={pinned}, but {name} {version} is installed "
                          "(not the kernel that release was built and tested with)"]
    torch = release.get("torch")
    if torch is None:
        return None, f"{sglang[0]} {sglang[1]} pins {name}=={pinned} but no torch", []
    return torch, f"{sglang[0]} {sglang[1]} pins {name}=={pinned} with torch=={torch}", []


def torch_problem(kernel: Tuple[str, str], built_for: Optional[str], how: str, torch: Optional[str]) -> List[str]:
    if built_for is None or torch is None or pinned_matches(built_for, torch):
        return []
    return [f"{kernel[0]} {kernel[1]} is built for torch {built_for} ({how}), but torch {torch} is installed"]


def check() -> Tuple[Dict[str, Any], List[str]]:
    """(evidence, problems) for the distributions installed in this Python."""
    versions = {n: d for n in (*FLASHINFER, *KERNELS, "torch", "sglang") if (d := _distribution(n)) is not None}
    ev: Dict[str, Any] = {"flashinfer": {n: versions[n].version for n in FLASHINFER if n in versions}}
    problems = flashinfer_problems(ev["flashinfer"])
    kernel = next((versions[n] for n in KERNELS if n in versions), None)
    if kernel is not None:
        pair = (name_of(kernel.metadata["Name"]), kernel.version)
        sglang = versions.get("sglang")
        built_for, how, found = kernel_torch(pair, kernel.requires or [],
                                             ("sglang", sglang.version) if sglang else None,
                                             (sglang.requires or []) if sglang else [])
        torch = versions["torch"].version if "torch" in versions else None
        found += torch_problem(pair, built_for, how, torch)
        ev["sgl_kernel"] = {"distribution": pair[0], "version": pair[1], "built_for_torch": built_for,
                            "how": how, "torch": torch}
        problems += found
    return ev, problems


def _distribution(name: str) -> Optional[metadata.Distribution]:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
