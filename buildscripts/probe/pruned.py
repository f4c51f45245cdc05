"""Libraries the image's fatbin pruner rewrote (images/lean/prune_fatbins.py), and the checks that they work.

Each install layer writes /etc/sglang-images/fatbins/LAYER.json: the site folder, and per rewritten
library the archs whose machine code left it. Two checks read them:
  - CPU (arch-audit): the dynamic loader loads every rewritten library, in a process that imported
    torch first (as a server does, so their dependencies resolve the same way);
  - GPU (kernel-smoke): the driver loads every fatbin of every rewritten library that carries code
    for the GPU in hand (cuModuleLoadFatBinary, then unload), so a fatbin the rewrite damaged fails
    here rather than at the first launch of one of its kernels, which a server start may never make.
Standard library only.
"""

from __future__ import annotations

import json
import os
import sysconfig
from typing import Any, Dict, List

REPORTS = "/etc/sglang-images/fatbins"
REPORTS_ENV = "SGLANG_IMAGES_FATBIN_REPORTS"  # another folder (host mode: no image file system)


def libraries() -> Dict[str, Dict[str, Any]]:
    """Absolute path of every rewritten library -> its layer and site folder, dropped archs, bytes saved and,
    when it did not load before the rewrite either, the loader's error then (`did_not_load_before`)."""
    folder = os.environ.get(REPORTS_ENV) or REPORTS
    out: Dict[str, Dict[str, Any]] = {}
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name)) as fh:
            report = json.load(fh)
        for rel, info in sorted(report.get("pruned", {}).items()):
            site = report.get("site") or sysconfig.get_paths()["purelib"]
            out[os.path.join(site, rel)] = {"layer": name[:-5], "site": site, "archs": report.get("archs", []),
                                            **info}
    return out


def summary() -> Dict[str, Any]:
    """What the report says of an image's pruning: libraries rewritten, bytes saved, archs removed."""
    found = libraries()
    return {"libraries": len(found), "saved_bytes": sum(int(i.get("saved_bytes", 0)) for i in found.values()),
            "dropped_archs": sorted({a for i in found.values() for a in i.get("dropped", {})})}


# Run with the image's Python; prints one "@@pruned-load " line. The loader names a dependency it cannot
# find only after it has mapped the library itself, so the rewrite is checked all the same when one is
# absent: the driver (libcuda.so.1, which sgl_kernel's ops link; the GPU check loads those), or a library
# the image never had (torchcodec builds one core per FFmpeg major and needs only the FFmpeg present; with
# none installed, no core could load before pruning either).
DLOPEN = """
import ctypes, json, os
try:
    import torch  # noqa: F401  the CUDA libraries torch links, loaded first as in a server
except ImportError:
    pass  # an image without torch has no torch-linked library to resolve
failed, needs_driver, missing = {}, [], {}
for path in PATHS:
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        name, _, why = str(exc).partition(": ")
        if why.startswith("cannot open shared object file") and "/" not in name and name != os.path.basename(path):
            if name == "libcuda.so.1":
                needs_driver.append(path)
            else:
                missing[path] = name
        else:
            failed[path] = str(exc)[-300:]
print("@@pruned-load " + json.dumps({"loaded": len(PATHS) - len(failed) - len(needs_driver) - len(missing),
                                     "mapped_but_need_the_gpu_driver": needs_driver, "failed": failed,
                                     "mapped_but_a_dependency_is_absent": missing}))
"""

# Run with the image's Python on a GPU; prints one "@@json " line (the kernel-smoke convention).
DRIVER_LOAD = """
import ctypes, importlib.util, json
spec = importlib.util.spec_from_file_location("fatbin", FATBIN_PY)
fatbin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fatbin)
cuda = ctypes.CDLL("libcuda.so.1")
def ok(rc, what):
    if rc:
        raise SystemExit(f"{what} failed: CUresult {rc}")
ok(cuda.cuInit(0), "cuInit")
device, major, minor, ctx = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
ok(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
ok(cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device), "compute capability")
ok(cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device), "compute capability")
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
target = f"sm_{major.value}{minor.value}"
summary, failures = {}, []
for path in PATHS:
    with open(path, "rb") as fh:
        offset, size = fatbin.sections(fh)[".nv_fatbin"]
        fh.seek(0)
        data = fh.read()
    counts = {"loaded": 0, "no_code_for_this_gpu": 0}
    for box in fatbin.fatbins(data, offset, size):
        expected = any(fatbin.runs_on(entry, target) for entry, _raw in box.entries)
        image = ctypes.create_string_buffer(box.original())
        module = ctypes.c_void_p()
        rc = cuda.cuModuleLoadFatBinary(ctypes.byref(module), image)
        if rc == 0:
            counts["loaded"] += 1
            cuda.cuModuleUnload(module)
        elif not expected:
            counts["no_code_for_this_gpu"] += 1
        else:
            failures.append({"library": path, "fatbin_at": box.offset, "cu_result": rc})
    summary[path] = counts
result = {"gpu_arch": target, "libraries": summary, "failures": failures[:20], "ok": not failures}
if failures:
    result["error"] = f"{len(failures)} fatbin(s) with code for {target} failed to load in the driver"
print("@@json " + json.dumps(result))
"""


def dlopen_snippet(paths: List[str]) -> str:
    return f"PATHS = {json.dumps(paths)}\n" + DLOPEN


# Lazy loading (CUDA's default) would defer reading a module's code to its first kernel lookup.
DRIVER_ENV = {"CUDA_MODULE_LOADING": "EAGER"}


def driver_snippet(paths: List[str]) -> str:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fatbin.py")
    return f"PATHS = {json.dumps(paths)}\nFATBIN_PY = {json.dumps(here)}\n" + DRIVER_LOAD
