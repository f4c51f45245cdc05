#!/usr/bin/env python3
"""Fill the kernel caches a server start needs, at image build time and without a GPU.

    bake.py MANIFEST --archs sm_90a,sm_100a --profiles default --report /etc/sglang-images/warm.json

The manifest (images/warm/sglang-X.json) lists what SGLang compiled before its server was ready in
a recorded cold start on a GPU, per server profile: its own TVM-FFI JIT kernels (the exact `load_jit`
calls) and the FlashInfer JIT modules (the generator, `module:function`, with the arguments it was
called with; `archs` limits one to the archs where FlashInfer picks it). Both are keyed by arch, not
by device, so they can be built for any target:
  - SGLang's kernels land in $TVM_FFI_CACHE_DIR/<module>__arch_<9.0a>__tvmffi_<version>/<module>.so,
    which `load_jit` loads directly when present (no ninja, no nvcc);
  - FlashInfer's land in $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<90a>/cached_ops, one
    folder per arch set; its ninja finds nothing to do at start when the image's paths are unchanged.
One process per arch: FlashInfer reads FLASHINFER_CUDA_ARCH_LIST once, at import.
What cannot be built here (Triton kernels, DeepGEMM's shape-specific kernels) is copied from the
manifest's `first_start` into the report, which the verifier reads to know the image claims warm caches.
What it builds comes out the same in every build of the same inputs (repeatable.py); a stamped build's
report holds no seconds (they go to the build's log).
Standard library only, plus the image's SGLang and FlashInfer.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

import repeatable  # beside this script (images/warm/repeatable.py)


def arch_parts(arch: str) -> Tuple[int, int, str]:
    """sm_90a -> (9, 0, "a"), with the suffix SGLang and FlashInfer pick for that device at run time.

    The cache folders are named after what the server detects, not after the image's arch list:
    9.x and 10.x+ get "a", 12.0 gets "f" (family), other 12.x get "a".
    """
    digits = "".join(ch for ch in arch.split("_", 1)[-1] if ch.isdigit())
    major, minor = int(digits[:-1]), int(digits[-1])
    if major == 12 and minor == 0:
        return major, minor, "f"
    return major, minor, "a" if major >= 9 else ""


def bake_one(manifest: Dict[str, Any], arch: str, profiles: List[str]) -> Dict[str, Any]:
    """Build every module of `profiles` for one arch in this process; never needs a GPU."""
    major, minor, suffix = arch_parts(arch)
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = f"{major}.{minor}{suffix}"
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # nothing here may depend on a device
    from sglang.jit_kernel.utils import compile as jit  # imported after the env is set
    from sglang.jit_kernel.utils.arch import override_jit_cuda_arch

    built: List[Dict[str, Any]] = []
    seen = set()  # profiles share modules (e.g. the norm module): each is built and listed once
    for profile in profiles:
        entry = manifest["profiles"][profile]
        for call in entry.get("sglang_jit", []):
            started = time.monotonic()
            with override_jit_cuda_arch(major, minor, suffix):
                name = jit._jit_build_dir_name(_module_name(jit, call))  # SGLang's own cache-folder name
                if name in seen:
                    continue
                seen.add(name)
                try:
                    jit.load_jit(*call["args"], **call["kwargs"])
                except Exception as exc:  # built, but loading needs the driver's libcuda: fine here
                    loaded = f"not loaded here ({type(exc).__name__})"
                else:
                    loaded = "loaded"
            folder = os.path.join(os.path.expanduser(os.environ["TVM_FFI_CACHE_DIR"]), name)
            ok = any(f.endswith(".so") for f in os.listdir(folder)) if os.path.isdir(folder) else False
            built.append({"kind": "sglang-jit", "profile": profile, "module": name, "ok": ok, "note": loaded,
                          "seconds": round(time.monotonic() - started, 1)})
        for call in entry.get("flashinfer", []):
            call = {"ref": call} if isinstance(call, str) else call
            if not applies(call, arch):
                continue
            started = time.monotonic()
            module, func = call["ref"].split(":")
            generate = getattr(importlib.import_module(module), func)
            spec = generate(*_decode(call.get("args", [])), **_decode(call.get("kwargs", {})))
            if spec.name in seen:
                continue
            seen.add(spec.name)
            spec.build(verbose=False)
            built.append({"kind": "flashinfer", "profile": profile, "module": str(spec.build_dir),
                          "ok": spec.jit_library_path.exists(), "seconds": round(time.monotonic() - started, 1)})
    return {"arch": arch, "built": built}


def applies(call: Dict[str, Any], arch: str) -> bool:
    """Is a recorded module built for `arch`? `archs` names the GPUs FlashInfer picks it on (its FA3
    kernels only on sm_90), compared by major.minor: sm_90 and sm_90a are the same GPU."""
    return "archs" not in call or arch_parts(arch)[:2] in [arch_parts(a)[:2] for a in call["archs"]]


def _decode(value: Any) -> Any:
    """Recorded generator arguments back to Python: {"torch.dtype": "bfloat16"} -> torch.bfloat16."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"torch.dtype"}:
            import torch
            return getattr(torch, value["torch.dtype"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def _module_name(jit: Any, call: Dict[str, Any]) -> str:
    """The module name `load_jit` gives these arguments (its cache folder is named after it)."""
    name = "sgl_kernel_jit_" + "_".join(str(arg) for arg in call["args"])
    sources = [str((jit.KERNEL_PATH / "csrc" / f).resolve())
               for f in call["kwargs"].get("cpp_files", []) + call["kwargs"].get("cuda_files", [])]
    return name + "_" + jit._local_jit_source_hash(sources) if sources else name


def bake_archs(archs: List[str], profiles: List[str]) -> Tuple[List[Dict[str, Any]], str]:
    """Every arch's modules, one process per arch: (each arch's results, "") or ([], what failed)."""
    def bake_arch(arch: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", arch],
                              stdout=subprocess.PIPE, text=True, check=False)

    # The archs side by side, one process each, as many at once as there are cores: each module's
    # compile is mostly one nvcc process, so a lone arch leaves cores idle.
    if not profiles:  # nothing recorded to bake: the report still says what compiles at first start
        runs = [subprocess.CompletedProcess([], 0, json.dumps({"arch": arch, "built": []})) for arch in archs]
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(len(archs), os.cpu_count() or 1))) as pool:
            runs = list(pool.map(bake_arch, archs))
    results = []
    for arch, done in zip(archs, runs):
        if done.returncode != 0:
            return [], f"building the kernel caches for {arch} failed (exit {done.returncode})"
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    missing = [f"{r['arch']}: {b['module']}" for r in results for b in r["built"] if not b["ok"]]
    return ([], "no library was built for " + "; ".join(missing)) if missing else (results, "")


def report_of(manifest: Dict[str, Any], archs: List[str], profiles: List[str], unrecorded: List[str],
              results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The report the verifier reads (/etc/sglang-images/warm.json)."""
    return {
        "sglang": manifest["sglang"], "archs": archs, "profiles": profiles, "recorded": manifest["recorded"],
        "caches": {k: os.environ.get(k, "") for k in ("TVM_FFI_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                                                      "TRITON_CACHE_DIR", "SGLANG_CACHE_DIR")},
        "baked": results, "not_recorded": unrecorded,
        # Modules a baked profile is known to compile at first start on some GPU (the warm check allows them).
        "compiled_at_start": {p: manifest["profiles"][p].get("compiled_at_start", []) for p in profiles},
        "first_start": manifest.get("first_start", []) + [
            f"everything the `{p}` profile compiles: no start of it was recorded for SGLang {manifest['sglang']}"
            for p in unrecorded],
    }


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bake")
    ap.add_argument("manifest")
    ap.add_argument("--archs", required=True, help="comma-separated, e.g. sm_90a,sm_100a,sm_120a")
    ap.add_argument("--profiles", default="default")
    ap.add_argument("--report", required=True, help="JSON written for the verifier")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: bake one arch in this process
    a = ap.parse_args(argv)
    with open(a.manifest) as fh:
        manifest = json.load(fh)
    asked = [p for p in a.profiles.split(",") if p]
    # A profile with no recorded start for this SGLang is not an error: it compiles at first start,
    # and the report says so (as for an SGLang with no manifest at all).
    profiles = [p for p in asked if p in manifest["profiles"]]
    unrecorded = [p for p in asked if p not in manifest["profiles"]]
    if a.one:
        json.dump(bake_one(manifest, a.one, profiles), sys.stdout)
        return 0
    started, archs = time.monotonic(), [x for x in a.archs.split(",") if x]
    results, failed = bake_archs(archs, profiles)
    # A stamped build (SOURCE_DATE_EPOCH, every file time clamped to it) records no time of its making: not in
    # ninja's records (repeatable.py) and not in the report, whose seconds go to the build's log only.
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or None
    try:
        made = {} if failed else repeatable.make_repeatable(
            [os.path.expanduser(os.environ[k]) for k in ("TVM_FFI_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE")
             if os.environ.get(k)], epoch)
    except ValueError as exc:   # a ninja whose records this bake does not know: say so rather than guess
        failed = f"the kernel caches cannot be made repeatable: {exc}"
    if failed:
        sys.stderr.write(f"bake: {failed}\n")
        return 1
    seconds = round(time.monotonic() - started, 1)
    timings = [f"{r['arch']} {b['module'].rsplit('/', 1)[-1]} {b.pop('seconds') if epoch else b['seconds']}s"
               for r in results for b in r["built"]]
    report = report_of(manifest, archs, profiles, unrecorded, results)
    if not epoch:
        report["seconds"] = seconds
    os.makedirs(os.path.dirname(a.report) or ".", exist_ok=True)
    with open(a.report, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"bake: {len(timings)} modules for {', '.join(archs)} in {seconds}s ({'; '.join(timings)}); made "
          f"repeatable: {', '.join(f'{n} {kind}' for kind, n in made.items())}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
