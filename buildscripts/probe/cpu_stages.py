"""The stages that need no GPU: facts, import, flavour, arch-audit, toolchain, jit-compile.

Standard library only, Python >= 3.8. The image's own packages (torch, sglang, ...) are imported
only in child interpreters (core.python_snippet), so a crash or a hang there cannot take the probe
down. Prerequisites are chosen so that later stages still add evidence after an earlier failure:
flavour needs torch to import (not deep_gemm), and toolchain, arch-audit and jit-compile need
nothing but their own inputs. The import stage records each module as `import:<module>` in
ctx.results so that stages can name a single module as their prerequisite.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata, util
from typing import Any, Dict, List, Optional, Tuple

from . import (
    core,
    coupled,
    cudatools,
    extensions,
    fatbin,
    gpuruns,
    jitcompile,
    loaderfacts,
    pruned,
    shm,
    sitesize,
    toolchain,
    warmcheck,
)

# module -> (distributions that provide it, required). Optional modules that are not installed
# are reported as absent; an installed module that fails to import fails the stage.
MODULES: Dict[str, Tuple[Tuple[str, ...], bool]] = {
    "torch": (("torch",), True),
    "sglang": (("sglang",), True),
    "flashinfer": (("flashinfer-python", "flashinfer"), False),
    "deep_gemm": (("sgl-deep-gemm", "deep-gemm", "deep_gemm"), False),
    "triton": (("triton",), False),
    "sgl_kernel": (("sglang-kernel", "sgl-kernel"), False),
}
KEY_DISTRIBUTIONS = ("torch", "sglang", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
                     "sgl-deep-gemm", "triton", "sglang-kernel", "sgl-kernel", "nvidia-cuda-nvcc",
                     "nvidia-cuda-runtime", "cuda-toolkit", "xgrammar")
ENV_KEYS = ("CUDA_HOME", "CUDA_PATH", "PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "NVCC_CCBIN",
            "VIRTUAL_ENV", "TORCH_CUDA_ARCH_LIST", "FLASHINFER_CUDA_ARCH_LIST")
# Import errors that only mean "no NVIDIA driver here" (sgl_kernel picks its per-arch library from
# the GPU; without one it ends in "No module named 'common_ops'").
NEEDS_DRIVER = re.compile(r"libcuda\.so\.1: cannot open shared object file|No module named 'common_ops'|"
                          r"Found no NVIDIA driver|no CUDA-capable device")
OTHER_LOAD_ERROR = re.compile(r"(?<!libcuda)\.so[.\d]*: cannot open shared object file|undefined symbol")
IMPORT_SNIPPET = ("import importlib, json, time; t = time.time(); m = importlib.import_module({name!r}); "
                  "print('@@import ' + json.dumps({{'version': str(getattr(m, '__version__', '') or ''), "
                  "'file': getattr(m, '__file__', None), 'seconds': round(time.time() - t, 2)}}))")
LIBRARIES = ("torch", "sgl_kernel", "flashinfer", "flashinfer_jit_cache", "deep_gemm")
TORCH_ARCHS = ("import json, torch; print('@@archs ' + json.dumps({'flags': torch._C._cuda_getArchFlags(), "
               "'cuda': torch.version.cuda, 'torch': torch.__version__}))")



@core.stage("facts")
def facts(ctx: core.Context) -> Dict[str, Any]:
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                      if d.metadata["Name"])
    os_release = {}
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as fh:
            os_release = dict(ln.rstrip().split("=", 1) for ln in fh if "=" in ln)
    shared = shm.measure()
    small = shm.warning(shared, ctx.mode)
    return {
        "shm": shared, **({"warnings": [small]} if small else {}),
        "python": {"version": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix,
                   "venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix)},
        "os": os_release.get("PRETTY_NAME", "").strip('"') or platform.platform(),
        "libc": "-".join(platform.libc_ver()), "cpus": os.cpu_count(), "mode": ctx.mode,
        "env": {k: os.environ.get(k) for k in ENV_KEYS if os.environ.get(k) is not None},
        "packages": packages, "distributions": cudatools.installed_versions(KEY_DISTRIBUTIONS),
        # What the build did to the image for size and start-up (the report's sizes page shows it).
        "pruned_fatbins": pruned.summary(), "warm_caches": warmcheck.summary(),
        "largest_packages": sitesize.largest_packages(),
    }


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or bool(glob.glob("/dev/nvidia[0-9]*"))


def _import_one(name: str, deadline: cudatools.Deadline) -> Dict[str, Any]:
    _dists, required = MODULES[name]
    if util.find_spec(name) is None:
        return {"status": core.FAILED if required else "absent",
                "summary": "failed: not installed" if required else "absent: not installed", "log": ""}
    try:
        proc = core.python_snippet(IMPORT_SNIPPET.format(name=name), timeout=deadline.left())
    except core.StageFailed as exc:   # this import hung: say so, and keep the other modules' results
        return {"status": core.FAILED, "summary": f"failed: {exc.reason}", "log": exc.log}
    out = proc.stdout or ""
    line = next((ln for ln in out.splitlines() if ln.startswith("@@import ")), None)
    if proc.returncode == 0 and line:
        info = json.loads(line[len("@@import "):])
        return {"status": core.PASSED, "summary": f"ok {info['version']}".strip(), "log": "",
                "version": info["version"], "seconds": info["seconds"]}
    error = cudatools.error_line(out)
    # One level below a load failure: what ldd says the module's libraries need and cannot find.
    below = loaderfacts.for_module(name, out, deadline)
    missing, root = below if below else ({}, "")
    beyond_driver = loaderfacts.beyond_driver(missing)
    if not _gpu_present() and NEEDS_DRIVER.search(out) and not OTHER_LOAD_ERROR.search(out) and not beyond_driver:
        return {"status": core.SKIPPED, "summary": f"skipped: needs a GPU ({error})", "log": out}
    other = cudatools.other_majors(out)   # libcudart.so.12 asked for where the image has CUDA 13: say so
    said = [other] if other else []
    if beyond_driver or (missing and _gpu_present()):
        said.append(loaderfacts.describe(beyond_driver or missing, root))
    return {"status": core.FAILED, "summary": f"failed: {error}" + "".join(f" ({s})" for s in said), "log": out}


@core.stage("import")
def import_modules(ctx: core.Context) -> Dict[str, Any]:
    deadline = cudatools.Deadline(ctx.stage_timeout)
    with ThreadPoolExecutor(max_workers=2) as pool:   # each import is its own interpreter
        futures = {n: pool.submit(_import_one, n, deadline) for n in MODULES}
        done = {n: f.result() for n, f in futures.items()}
    for name, res in done.items():
        ctx.results["import:" + name] = {"status": res["status"]}
    ev: Dict[str, Any] = {"modules": {n: r["summary"] for n, r in done.items()},
                          "seconds": {n: r["seconds"] for n, r in done.items() if "seconds" in r},
                          "versions": {n: r["version"] for n, r in done.items() if r.get("version")}}
    ev["coupled"], mismatched = coupled.check()  # versions that must move together, from metadata alone
    failed = [n for n, r in done.items() if r["status"] == core.FAILED]
    if failed or mismatched:
        log = "\n".join(f"== import {n} ==\n{done[n]['log'][-3000:]}" for n in failed)
        reasons = [f"{n}: {done[n]['summary'][len('failed: '):]}" for n in failed] + mismatched
        raise core.StageFailed("; ".join(reasons), ev, log)
    return ev


@core.stage("flavour", needs=("import:torch",))
def flavour(ctx: core.Context) -> Dict[str, Any]:
    proc = core.python_snippet(TORCH_ARCHS, timeout=min(300.0, ctx.stage_timeout))
    info = _tagged(proc.stdout or "", "@@archs ")
    if info is None:
        msg = "torch does not report its CUDA version"
        raise core.StageFailed(msg, log=proc.stdout or "")
    ev = {"torch": info["torch"], "torch_cuda": info["cuda"], "lane_cuda": ctx.lane_cuda,
          "versions": {"torch.version.cuda": str(info["cuda"])}}
    if info["cuda"] is None:
        msg = f"torch is a CPU-only build ({info['torch']}: torch.version.cuda is None)"
        raise core.StageFailed(msg, ev)
    if ctx.lane_cuda is None:
        msg = (
            f"no lane CUDA version to compare with (torch.version.cuda = {info['cuda']}); "
                                "pass --lane-cuda"
        )
        raise core.StageSkipped(msg)
    if ".".join(info["cuda"].split(".")[:2]) != ctx.lane_cuda:
        msg = (
            f"torch {info['torch']} is built for CUDA {info['cuda']}, but the lane promises "
                               f"{ctx.lane_cuda}"
        )
        raise core.StageFailed(msg, ev)
    return ev


def _tagged(out: str, tag: str) -> Optional[Dict[str, Any]]:
    line = next((ln for ln in out.splitlines() if ln.startswith(tag)), None)
    return json.loads(line[len(tag):]) if line else None


@core.stage("arch-audit")
def arch_audit(ctx: core.Context) -> Dict[str, Any]:
    archs = ctx.every_arch()
    ev: Dict[str, Any] = {"libraries": {}, "torch_arch_list": None, "targets": ctx.archs,
                          "also_audited": ctx.also_archs}
    if ctx.results.get("import:torch", {}).get("status") != core.FAILED:
        _torch_arch_list(ctx, archs, ev)
    gaps = _Gaps()
    runs: Dict[str, Dict[str, str]] = {a: {} for a in archs}
    rewritten = pruned.libraries()
    for lib in LIBRARIES:
        scanned = _scan_library(lib, archs)
        if scanned is None:
            continue
        ev["libraries"][lib], entries = scanned
        for arch, says in _what_runs(lib, entries, ctx, ev["libraries"][lib], gaps).items():
            runs[arch][lib] = says
    ev["runs"] = runs
    ev["summary"] = [_run_line(arch, runs[arch], arch in ctx.archs) for arch in archs]
    said = gaps.said() + _pruned_off_target(ctx, rewritten)
    if said:
        ev.setdefault("warnings", []).extend(said)
    ev["cuobjdump"] = _cross_check(ev)
    if rewritten:  # what the image's fatbin pruner rewrote must still load
        gaps.lacking += _pruned_load(ctx, rewritten, ev)
    if gaps.lacking:
        raise core.StageFailed("; ".join(gaps.lacking), ev)
    return ev


@dataclass
class _Gaps:
    """What the audit found missing: for a target arch it fails the stage (`lacking`); for an arch only audited,
    and a PTX-only start, it is said as a warning and never fails."""
    lacking: List[str] = field(default_factory=list)
    off_target: Dict[str, List[str]] = field(default_factory=dict)   # arch -> libraries with nothing it runs
    at_start: Dict[str, List[str]] = field(default_factory=dict)     # arch -> libraries it would JIT from PTX

    def said(self) -> List[str]:
        out = [f"{arch} is not a target arch; no code it can run in {', '.join(libs)}"
               for arch, libs in self.off_target.items()]
        return out + [f"{arch} would JIT-compile PTX at start (slow first start) in {', '.join(libs)}; it has no "
                      "SASS that runs there" for arch, libs in self.at_start.items()]


def _torch_arch_list(ctx: core.Context, archs: List[str], ev: Dict[str, Any]) -> None:
    """torch's own TORCH_CUDA_ARCH_LIST (from a child interpreter) and which archs it covers."""
    info = _tagged(core.python_snippet(TORCH_ARCHS, timeout=min(300.0, ctx.stage_timeout)).stdout or "", "@@archs ")
    ev["torch_arch_list"] = info["flags"].split() if info else None
    ev["torch_arch_list_covers"] = {a: torch_covers(ev["torch_arch_list"] or [], a) for a in archs}


def _scan_library(lib: str, archs: List[str]) -> Optional[Tuple[Dict[str, Any], List[fatbin.Entry]]]:
    """(the library's evidence, every fatbin entry in its shared objects); None when it is not installed."""
    spec = util.find_spec(lib)
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:
        return None
    files = fatbin.shared_objects(roots[0])
    entries: List[fatbin.Entry] = []
    with_code = {}
    for path in files:
        try:
            found = fatbin.read_file(path)
        except (fatbin.NotElf, OSError):
            continue
        if found:
            entries += found
            with_code[os.path.relpath(path, roots[0])] = sorted({e.name for e in found})
    cover = fatbin.coverage(entries, archs)
    return ({"files_scanned": len(files), "files_with_gpu_code": with_code,
             "per_arch": {a: c["status"] for a, c in cover.items()}, "detail": cover}, entries)


def _what_runs(lib: str, entries: List[fatbin.Entry], ctx: core.Context, found: Dict[str, Any],
               gaps: _Gaps) -> Dict[str, str]:
    """Arch -> what it would run of the library, said in words; each gap goes into `gaps`."""
    archs = ctx.every_arch()
    if not entries:
        found["note"] = "no compiled GPU code (kernels are JIT-compiled at runtime)"
        found["per_arch"] = {a: "jit" for a in archs}
        return {a: "no compiled GPU code (JIT-compiled when used)" for a in archs}
    # What each GPU would run, by CUDA's rules: not the arch's name in the file (sm_121 runs sm_120 SASS).
    what = {a: gpuruns.what_runs(entries, a) for a in archs}
    found["runs"] = {a: {"code": r.code, "uses": r.uses} for a, r in what.items()}
    for arch, run in what.items():
        if run.code == gpuruns.PTX_JIT:
            gaps.at_start.setdefault(arch, []).append(f"{lib} ({run.uses})")
        elif run.code == gpuruns.NOTHING and arch in ctx.archs:
            gaps.lacking.append(f"{lib} has no code for {arch}{_carried(run, arch)}")
        elif run.code == gpuruns.NOTHING:
            gaps.off_target.setdefault(arch, []).append(f"{lib}{_carried(run, arch)}")
    return {arch: run.says() for arch, run in what.items()}


def _pruned_off_target(ctx: core.Context, rewritten: Dict[str, Dict[str, Any]]) -> List[str]:
    """For each arch only audited, what the build took away from it: said, never failing."""
    said = []
    for arch in ctx.also_archs:
        removed = _pruned_for(arch, rewritten)
        if removed:
            said.append(f"{arch} is not a target arch; the image's fatbin pruner removed its machine code from "
                        f"{len(removed)} {'library' if len(removed) == 1 else 'libraries'} ({', '.join(removed[:3])}"
                        f"{', ...' if len(removed) > 3 else ''}): "
                        "it keeps only what the targets run")
    return said


def _pruned_load(ctx: core.Context, rewritten: Dict[str, Dict[str, Any]], ev: Dict[str, Any]) -> List[str]:
    """Load every library the image's fatbin pruner rewrote, in a child interpreter; why each that must load
    does not (and a check that died) are failures of the stage."""
    done = core.python_snippet(pruned.dlopen_snippet(sorted(rewritten)), timeout=min(300.0, ctx.stage_timeout))
    loaded = _tagged(done.stdout or "", "@@pruned-load ")
    ev["pruned"] = {"libraries": rewritten, "load": loaded}
    if loaded is None:
        return [f"the load check of the pruned libraries died: {(done.stdout or '')[-300:]}"]
    lacking = _not_loading(loaded["failed"], rewritten, ev, ctx)
    ev["pruned"]["absent_dependencies"] = [
        f"{path}: mapped; it needs {dependency}, which this image does not have (it could not load before "
        "pruning either)" for path, dependency in loaded.get("mapped_but_a_dependency_is_absent", {}).items()]
    return lacking


def _carried(run: gpuruns.Runs, arch: str) -> str:
    """What a library carries that `arch` cannot run, e.g. ` (it has sm_90a, sm_120a; sm_120a is arch-specific and
    runs on its own arch alone)` for sm_121a."""
    if not run.present:
        return ""
    number = fatbin.parse_arch(arch)[0]
    specific = [n for n in run.present if n.endswith("a") and fatbin.parse_arch(n)[0] // 10 == number // 10]
    said = "is arch-specific and runs on its own arch" if len(specific) == 1 else \
        "are arch-specific and run on their own arch"
    why = f"; {', '.join(specific)} {said} alone" if specific else ""
    return f" (it has {', '.join(run.present)}{why})"


def _run_line(arch: str, runs: Dict[str, str], target: bool) -> str:
    """One arch, what it runs of each library: `sm_121a (audited, not a target): sm_120 SASS (older minor) in
    sgl_kernel, torch; nothing (has sm_120a) in flashinfer`."""
    by_code: Dict[str, List[str]] = {}
    for lib, says in runs.items():
        by_code.setdefault(says, []).append(lib)
    said = "; ".join(f"{says} in {', '.join(libs)}" for says, libs in by_code.items()) or "no library with GPU code"
    return f"{arch} ({'target' if target else 'audited, not a target'}): {said}"


def _pruned_for(arch: str, rewritten: Dict[str, Dict[str, Any]]) -> List[str]:
    """The rewritten libraries (relative to their site folder) the pruner took machine code of `arch`'s
    generation from (sm_121 and sm_121a alike): the wheel carried it, the image does not."""
    number = fatbin.parse_arch(arch)[0]
    return [os.path.relpath(path, info.get("site") or "/") for path, info in sorted(rewritten.items())
            if number in {int(m.group(1)) for m in map(fatbin.ARCH_RE.match, info.get("dropped", {})) if m}]


def torch_covers(flags: List[str], arch: str) -> bool:
    """Whether torch's arch list (`sm_90`, `compute_120`, ...) has code that runs on `arch`, by CUDA's rules:
    sm_100 machine code runs on sm_103, sm_120 on sm_121."""
    entries = []
    for flag in flags:
        match = fatbin.ARCH_RE.match(flag)
        if match:
            kind = "sass" if flag.startswith("sm_") else "ptx"
            entries.append(fatbin.Entry(kind, int(match.group(1)), match.group(2), False, ""))
    return any(fatbin.runs_on(e, arch) for e in entries)


def _not_loading(failed: Dict[str, str], rewritten: Dict[str, Dict[str, Any]], ev: Dict[str, Any],
                 ctx: core.Context) -> List[str]:
    """Why each rewritten library that the loader refuses does not load, as failures of the stage; the
    findings that do not fail it (an optional extension built against another torch) become warnings."""
    lacking = []
    for path, why in sorted(failed.items()):
        info = rewritten.get(path, {})
        if not info.get("did_not_load_before"):
            # The build refuses a rewrite that breaks a loadable library; an image built before that check
            # (or changed since) can still show one.
            lacking.append(f"pruned library does not load: {path}: {why}")
            continue
        finding = extensions.judge(path, why, info["site"], timeout=min(300.0, ctx.stage_timeout))
        if finding is None:
            lacking.append(f"library does not load (it did not before pruning either): {path}: {why}")
            continue
        ev.setdefault("extensions_not_loading", []).append(finding)
        if finding["fatal"]:
            lacking.append(finding["summary"])
        else:
            ev.setdefault("warnings", []).append(finding["summary"])
    return lacking


def _cross_check(ev: Dict[str, Any]) -> Dict[str, Any]:
    """When cuobjdump exists, compare its SASS list for one small file per library with ours."""
    home, _ = cudatools.find_cuda_home(dict(os.environ))
    tool = next((p for p in ([os.path.join(home, "bin", "cuobjdump")] if home else []) if os.path.exists(p)),
                None) or shutil.which("cuobjdump")
    if tool is None:
        return {"available": False}
    out: Dict[str, Any] = {"available": True, "tool": tool}
    for lib, info in ev["libraries"].items():
        files = info["files_with_gpu_code"]
        if not files:
            continue
        spec = util.find_spec(lib)
        root = next(iter(spec.submodule_search_locations or [])) if spec else ""
        rel = min(files, key=lambda f: os.path.getsize(os.path.join(root, f)))
        proc = core.sh([tool, "--list-elf", os.path.join(root, rel)], timeout=120)
        theirs = sorted(set(re.findall(r"\bsm_\d+[af]?\b", proc.stdout or "")))
        ours = sorted(n for n in files[rel] if n.startswith("sm_"))
        out[lib] = {"file": rel, "cuobjdump": theirs, "agrees": theirs == ours}
    return out


@core.stage("toolchain")
def toolchain_stage(ctx: core.Context) -> Dict[str, Any]:
    return toolchain.run(ctx)


@core.stage("jit-compile")
def jit_compile(ctx: core.Context) -> Dict[str, Any]:
    return jitcompile.run(ctx)
