"""Find the CUDA toolkit the way torch, deep_gemm and flashinfer do, and drive nvcc (stdlib only)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import core, fatbin

# Oldest nvcc (major, minor) that can target an arch; "f" (family) targets need 12.9.
MIN_NVCC = {90: (12, 0), 100: (12, 8), 101: (12, 8), 103: (12, 9), 110: (13, 0), 120: (12, 8), 121: (12, 9)}
RELEASE_RE = re.compile(r"release (\d+)\.(\d+)")
# Lines that name a cause beat lines that only say something failed ("ld returned 1 exit status").
CAUSE_LINE_RE = re.compile(r"fatal|cannot|not found|No such file|undefined|Unsupported|Assertion|Error:")
ERROR_LINE_RE = re.compile(r"error|failed", re.I)
BARE_EXCEPTION_RE = re.compile(r"^\w+(Error|Exception)$")
# A CUDA library of one major that a loader could not open (libcudart.so.12 where the image has CUDA 13).
CUDA_LIBRARIES = r"lib(?:cudart|nvrtc|cublas(?:Lt)?|cufft|curand|cusparse|cusolver|nvJitLink)"
MISSING_SONAME_RE = re.compile(r"\b(" + CUDA_LIBRARIES + r")\.so\.(\d+): cannot open shared object file")


class Deadline:
    """One stage's time budget, shared by the commands it runs."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(1.0, self.end - time.monotonic())

    def capped(self, cap: float) -> float:
        """A step's own time limit, `cap` at the default stage deadline (900 s) and stretched with a longer one
        (emulation's: its steps run side by side under QEMU), never past the stage's end."""
        return min(max(cap, cap * self.seconds / 900.0), self.left())


def find_cuda_home(env: Dict[str, str]) -> Tuple[Optional[str], str]:
    """(CUDA home, how it was found). torch.utils.cpp_extension._find_cuda_home, deep_gemm's
    find_cuda_home and flashinfer's get_cuda_path all search the same order, reproduced here."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            return env[var], f"${var}"
    nvcc = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc)), f"`which nvcc` = {nvcc}"
    if os.path.exists("/usr/local/cuda"):
        return "/usr/local/cuda", "/usr/local/cuda exists"
    return None, "CUDA_HOME and CUDA_PATH unset, no nvcc on PATH, no /usr/local/cuda"


def library_dirs(roots: Optional[Iterable[str]] = None) -> List[str]:
    """Where CUDA runtime libraries live in an image: pip's site-packages/nvidia/*/lib (cu12 wheels one folder per
    library, cu13 wheels nvidia/cu13/lib) under `roots` (sys.path), and, when `roots` is not given, the CUDA home's,
    /usr/local/cuda*'s and the system's library folders."""
    dirs = [d for entry in (sys.path if roots is None else roots)
            for d in glob.glob(os.path.join(entry, "nvidia", "*", "lib"))]
    if roots is None:
        home, _ = find_cuda_home(dict(os.environ))
        homes = ([home] if home else []) + glob.glob("/usr/local/cuda*")
        dirs += [os.path.join(h, sub) for h in homes for sub in ("lib64", "lib")] + glob.glob("/usr/lib/*-linux-gnu")
    return sorted({d for d in dirs if os.path.isdir(d)})


def other_majors(log: str, roots: Optional[Iterable[str]] = None) -> Optional[str]:
    """When `log` says a CUDA library of one major cannot be opened, the same library of another major that the
    image has, e.g. `the image has libcudart.so.13 (/venv/.../nvidia/cu13/lib): another CUDA major than
    libcudart.so.12`; None when the log says nothing of the kind or the image has no other major of it."""
    missing = MISSING_SONAME_RE.search(log)
    if missing is None:
        return None
    lib, major = missing.group(1), missing.group(2)
    found: Dict[str, str] = {}
    for folder in library_dirs(roots):
        for path in sorted(glob.glob(os.path.join(folder, lib + ".so.*"))):
            other = re.match(re.escape(lib) + r"\.so\.(\d+)", os.path.basename(path))
            if other and other.group(1) != major:
                found.setdefault(f"{lib}.so.{other.group(1)}", folder)
    if not found:
        return None
    said = ", ".join(f"{name} ({folder})" for name, folder in sorted(found.items()))
    return f"the image has {said}: another CUDA major than {lib}.so.{major}"


def stray_nvccs() -> List[str]:
    """nvcc binaries that pip wheels put under site-packages/nvidia, which nothing may point at."""
    found = []
    for entry in sys.path:
        found += glob.glob(os.path.join(entry, "nvidia", "*", "bin", "nvcc"))
        found += glob.glob(os.path.join(entry, "nvidia", "cuda_nvcc", "bin", "nvcc"))
    return sorted(set(found))


def release(text: str) -> Optional[Tuple[int, int]]:
    m = RELEASE_RE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def min_nvcc(arch: str) -> Tuple[int, int]:
    number, suffix = fatbin.parse_arch(arch)
    need = MIN_NVCC.get(number, (12, 8) if number >= 100 else (11, 8))
    return max(need, (12, 9)) if suffix == "f" else need


def gencode(arch: str) -> List[str]:
    """`-gencode arch=compute_100a,code=sm_100a` for sm_100a."""
    return ["-gencode", f"arch={arch.replace('sm_', 'compute_')},code={arch}"]


def flashinfer_arch(arch: str) -> str:
    """sm_100a -> 10.0a, the spelling FLASHINFER_CUDA_ARCH_LIST uses."""
    number, suffix = fatbin.parse_arch(arch)
    return f"{number // 10}.{number % 10}{suffix}"


def host_compiler(env: Dict[str, str]) -> Optional[str]:
    """The C++ compiler nvcc will use: NVCC_CCBIN if set, else the first of g++/c++ on PATH."""
    if env.get("NVCC_CCBIN"):
        return shutil.which(env["NVCC_CCBIN"], path=env.get("PATH")) or None
    for name in ("g++", "c++"):
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found:
            return found
    return None


def ninja(env: Dict[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """(ninja on PATH, ninja next to this Python): the JIT builders need the first."""
    beside = os.path.join(os.path.dirname(sys.executable), "ninja")
    return shutil.which("ninja", path=env.get("PATH", os.defpath)), beside if os.path.exists(beside) else None


def link_dirs(home: str) -> List[str]:
    """The -L flags flashinfer's JIT links with (lib64 and lib64/stubs of the CUDA home)."""
    return [f"-L{home}/lib64", f"-L{home}/lib64/stubs"]


def run(argv: Sequence[str], deadline: Deadline, cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None) -> Tuple[bool, float, str]:
    """(ok, seconds, '$ command' + output) for one compiler command."""
    started = time.monotonic()
    proc = core.sh(list(argv), timeout=deadline.left(), cwd=cwd, env=env)
    took = round(time.monotonic() - started, 2)
    return proc.returncode == 0, took, "$ " + " ".join(argv) + "\n" + (proc.stdout or "")


def error_line(log: str) -> str:
    """The most telling line of a compiler log: the last one that looks like an error."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith("$ ")]
    causes = [ln for ln in lines if CAUSE_LINE_RE.search(ln)]
    hits = [ln for ln in lines if ERROR_LINE_RE.search(ln)]
    best = (causes or hits or lines or ["(no output)"])[-1]
    if BARE_EXCEPTION_RE.match(best) and best in lines:   # "AssertionError": name the failing source line
        code = [ln for ln in lines[:lines.index(best)] if not ln.startswith(("File ", "^", "~")) and
                not set(ln) <= set("^~ ")]
        if code:
            best = f"{best} ({code[-1]})"
    return best[:300]


def installed_versions(names: Iterable[str]) -> Dict[str, str]:
    """Versions of the installed distributions among `names` (absent ones left out)."""
    from importlib import metadata
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
