"""What lies one level below a load failure, as the loader and the file system show it (stdlib only).

A wrapper's words name no cause: sgl_kernel's "Could not load any common_ops library" is said alike for a build of
another torch, a CUDA library of another major and a system library that is not installed (libnuma.so.1); "nvcc
does not run" is said alike for a CUDA home that is only a runtime and for an nvcc that is broken. The loader and
the folders say which: `ldd` lists every library a compiled module needs and cannot find (`libnuma.so.1 => not
found`), and a CUDA home is a folder whose contents can be read. The stages put these facts into their reasons,
where the failure classifier reads them (docs/classifier.md, "Look one level below").
"""

from __future__ import annotations

import os
import re
import shutil
from importlib import util
from typing import Dict, List, Optional, Tuple

from . import core, cudatools, fatbin
from .cudatools import Deadline

# Words of a failure to load a compiled module (the loader's, or sgl_kernel's wrapper around it).
LOAD_FAILURE = re.compile(r"cannot open shared object file|Could not load any common_ops library|"
                          r"No module named 'common_ops'")
NOT_FOUND = re.compile(r"^\s*(\S+\.so[\w.]*) => not found\s*$", re.MULTILINE)
# The NVIDIA driver's own libraries: absent where there is no GPU, mounted by the container runtime where there is.
DRIVER_LIBRARY = re.compile(r"^lib(?:cuda|nvidia-[\w.-]+|nvcuvid)\.so\b")
MOST_FILES = 32            # a package's .so files looked at (torch has about 40 under torch/lib)
MOST_NAMED = 4             # missing libraries named in a reason
LDD_SECONDS = 20.0


def unresolved(files: List[str], deadline: Deadline) -> Dict[str, str]:
    """{library the loader cannot find: the first of `files` that needs it}, from `ldd` (empty without ldd).

    ldd runs with the folders a running SGLang has on hand added to LD_LIBRARY_PATH (torch's lib/, the pip
    nvidia-* wheels' lib/ folders, the CUDA home's, the package's own): torch extensions find libc10.so and the
    CUDA runtime there only because torch was imported first, and that is no missing library."""
    ldd = shutil.which("ldd")
    found: Dict[str, str] = {}
    if ldd is None or not files:
        return found
    env = {"LD_LIBRARY_PATH": os.pathsep.join([*search_path(files), os.environ.get("LD_LIBRARY_PATH", "")])}
    for path in files[:MOST_FILES]:
        try:
            out = core.sh([ldd, path], timeout=deadline.capped(LDD_SECONDS), env=env).stdout or ""
        except core.StageFailed:   # ldd hung on this file: the others still say what they need
            continue
        for library in NOT_FOUND.findall(out):
            found.setdefault(library, path)
    return found


def search_path(files: List[str]) -> List[str]:
    """Where libraries are found at run time beside the ld cache: the package's own folders, torch's lib/ and
    the CUDA library folders of the image (cudatools.library_dirs)."""
    torch_lib = [os.path.join(d, "lib") for d in package_folders("torch")]
    folders = [os.path.dirname(f) for f in files] + torch_lib + cudatools.library_dirs()
    return [d for d in dict.fromkeys(folders) if os.path.isdir(d)]


def package_folders(name: str) -> List[str]:
    """The folders of an installed package (none for a plain module or one that is not installed)."""
    return list(getattr(util.find_spec(name), "submodule_search_locations", None) or [])


def beyond_driver(missing: Dict[str, str]) -> Dict[str, str]:
    """The missing libraries that a GPU machine's driver would not bring."""
    return {lib: path for lib, path in missing.items() if not DRIVER_LIBRARY.match(lib)}


def describe(missing: Dict[str, str], root: str) -> str:
    """`ldd: libnuma.so.1 => not found (sgl_kernel/sm90/common_ops.abi3.so)`, at most MOST_NAMED libraries."""
    parent = os.path.dirname(root.rstrip(os.sep))
    said = [f"{lib} => not found ({os.path.relpath(path, parent)})"
            for lib, path in sorted(missing.items())[:MOST_NAMED]]
    more = len(missing) - MOST_NAMED
    return "ldd: " + "; ".join(said) + (f"; and {more} more" if more > 0 else "")


def for_module(name: str, log: str, deadline: Deadline) -> Optional[Tuple[Dict[str, str], str]]:
    """When `log` says `name` failed to load a compiled part: ({library the loader cannot find: the .so that needs
    it}, the package folder), by `ldd` on the package's .so files; None when the log says nothing of the kind or
    the module has no package folder."""
    if not LOAD_FAILURE.search(log):
        return None
    roots = package_folders(name)
    if not roots:
        return None
    return unresolved(fatbin.shared_objects(roots[0]), deadline), roots[0]


def cuda_home_problem(home: str, how: str) -> Optional[str]:
    """What is wrong with a CUDA home that has no nvcc, in the folder's own terms: `the CUDA home /usr/local/cuda
    (found via /usr/local/cuda exists) has no bin/nvcc; it holds lib64, include`, or that it does not exist.
    None when bin/nvcc is there (then whatever nvcc printed says why it does not run)."""
    nvcc = os.path.join(home, "bin", "nvcc")
    if os.path.exists(nvcc):
        return None
    where = f"the CUDA home {home} (found via {how})"
    if not os.path.isdir(home):
        return f"{where} does not exist: no bin/nvcc there"
    try:
        held = sorted(os.listdir(home))
    except OSError as exc:
        return f"{where} has no bin/nvcc; its contents cannot be listed ({exc.strerror})"
    shown = ", ".join(held[:8]) + (f" and {len(held) - 8} more" if len(held) > 8 else "")
    return f"{where} has no bin/nvcc; it holds {shown or 'nothing'}"
