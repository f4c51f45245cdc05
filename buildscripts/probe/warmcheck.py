"""Does an image that claims baked kernel caches really start without compiling? (stdlib only)

An image built with `warm:` on its toolkit carries a bake report (images/warm/bake.py) naming its
cache folders and the server profiles it baked. While the server starts, `Watch` records every file
that appears or changes under the compiled-kernel caches (SGLang's TVM-FFI JIT, FlashInfer, DeepGEMM)
and every CUDA compiler process (nvcc and the tools it drives) outside the probe's own session; a start with a
baked profile that
compiled anything on an arch the image baked is a warning naming what it compiled (`cold_start`), on
another arch, or with another profile, a record. kernel-smoke reads the same folders around each of its
checks, which load from them too (`checks_compiled`); what changed while a check ran beside the start is the
check's to name (`apart_from_checks`). Triton is not
watched: it compiles at first start with its own ptxas by design, and the bake report lists it under
`first_start`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

from . import procstat

REPORT = "/etc/sglang-images/warm.json"
REPORT_ENV = "SGLANG_IMAGES_WARM_REPORT"  # another report path (host mode: no image file system)
COMPILERS = {"nvcc", "cicc", "cudafe++", "nvlink", "fatbinary"}
BUILT = (".so", ".o", ".cubin", ".ptx")
SHOWN = 40   # files a record names; its count is whole


def load_claim() -> Optional[Dict[str, Any]]:
    """The image's bake report, or None when the image makes no warm-cache claim."""
    path = os.environ.get(REPORT_ENV) or REPORT
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        claim: Dict[str, Any] = json.load(fh)
    claim["path"] = path
    return claim


def summary() -> Optional[Dict[str, Any]]:
    """What the report says of an image's baked caches: archs, modules, what compiles at first start."""
    claim = load_claim()
    if claim is None:
        return None
    return {"archs": claim.get("archs", []), "profiles": claim.get("profiles", []),
            "modules": sum(len(r.get("built", [])) for r in claim.get("baked", [])),
            "bake_seconds": claim.get("seconds"), "first_start": claim.get("first_start", [])}


def covers(claim: Dict[str, Any], profile: str) -> bool:
    """Did the image bake the kernels of this server profile?"""
    return profile in claim.get("profiles", [])


def declared(claim: Dict[str, Any], profile: str) -> List[str]:
    """Cache folders the bake report says this profile compiles at first start on some GPU (FlashInfer's
    CUTLASS attention on sm_100 for the flashinfer profile): a warm start may compile these."""
    return [str(m["module"]) for m in (claim.get("compiled_at_start") or {}).get(profile, [])]


def watched_dirs(claim: Dict[str, Any], env: Dict[str, str]) -> List[str]:
    """The compiled-kernel cache folders, as the server will see them (its env wins over the report's)."""
    caches = dict(claim.get("caches") or {})
    caches.update({k: v for k, v in env.items() if k in caches})
    dirs = []
    if caches.get("TVM_FFI_CACHE_DIR"):
        dirs.append(caches["TVM_FFI_CACHE_DIR"])
    if caches.get("FLASHINFER_WORKSPACE_BASE"):
        dirs.append(os.path.join(caches["FLASHINFER_WORKSPACE_BASE"], ".cache", "flashinfer"))
    if caches.get("SGLANG_CACHE_DIR"):
        dirs.append(os.path.join(caches["SGLANG_CACHE_DIR"], "deep_gemm"))
    return [os.path.expanduser(d) for d in dirs]


def snapshot(dirs: List[str]) -> Dict[str, Tuple[int, float]]:
    """Compiled artefacts under `dirs`: path -> (size, mtime)."""
    seen: Dict[str, Tuple[int, float]] = {}
    for top in dirs:
        for root, _subdirs, files in os.walk(top):
            for name in files:
                if name.endswith(BUILT):
                    path = os.path.join(root, name)
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    seen[path] = (st.st_size, st.st_mtime)
    return seen


def changed(before: Dict[str, Tuple[int, float]], after: Dict[str, Tuple[int, float]]) -> List[str]:
    return sorted(p for p, stamp in after.items() if before.get(p) != stamp)


def _session(pid: str) -> Optional[int]:
    """The session a process belongs to, None if it is gone."""
    fields = procstat.fields(pid)
    return int(fields[3]) if fields and len(fields) > 3 else None


def compiler_processes(own_session: Optional[int] = None) -> Tuple[Set[str], Set[str]]:
    """Names of CUDA compiler processes running now (from /proc; empty where there is none): those outside
    `own_session`, and those in it. The server runs in a session of its own (server.start), and no process can
    move into another session, so whatever the server's tree starts, detached or not, is in the first set; the
    second holds the compiles of the probe's own stages beside the server (kernel-smoke's JIT checks)."""
    found: Set[str] = set()
    own: Set[str] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found, own
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm", errors="replace") as fh:   # any process's name, UTF-8 or not
                name = fh.read().strip()
        except OSError:
            continue
        if name in COMPILERS:
            mine = own_session is not None and _session(pid) == own_session
            (own if mine else found).add(name)
    return found, own


class Watch:
    """Records compiles while a server starts: files before/after, compiler processes in between. Compilers of
    the watching process's own session are kept apart: kernel-smoke compiles there while the server starts
    beside it, and they are not the server's."""

    def __init__(self, dirs: List[str], interval_s: float = 0.2) -> None:
        self.dirs, self.interval_s = dirs, interval_s
        self.before: Dict[str, Tuple[int, float]] = {}
        self.processes: Set[str] = set()
        self.beside: Set[str] = set()
        self.compiled: List[str] = []
        self.own_session = os.getsid(0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> "Watch":
        self.before = snapshot(self.dirs)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            found, own = compiler_processes(self.own_session)
            self.processes |= found
            self.beside |= own

    def stop(self) -> Dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=5)
        self.compiled = changed(self.before, snapshot(self.dirs))   # every one; the record names SHOWN
        return {"watched": self.dirs, "baked_files": len(self.before), "compiled_files": self.compiled[:SHOWN],
                "compiled_count": len(self.compiled), "compiler_processes": sorted(self.processes),
                "compiler_processes_beside": sorted(self.beside)}


def verdict(result: Dict[str, Any], allowed: Tuple[str, ...] = ()) -> Optional[str]:
    """Why a start that should have been warm was not; None when nothing was compiled (or only the
    `allowed` module folders, which the bake report declares as compiled at first start)."""
    if not result["baked_files"]:
        return "the image claims baked kernel caches, but its cache folders hold no compiled kernel"
    parts = []
    folder = [os.path.basename(os.path.dirname(p)) for p in result["compiled_files"]]  # one per file, not _modules
    declared_files = sum(1 for name in folder if name in allowed)
    unexplained = result["compiled_count"] - declared_files  # compiled_files is capped; the count is not
    if unexplained > 0:
        names = sorted({name for name in folder if name not in allowed})
        parts.append(f"{unexplained} file(s) compiled into the caches ({', '.join(names[:6])})")
    if result["compiler_processes"] and (unexplained > 0 or not declared_files):  # not the declared compile's
        parts.append("compiler processes ran: " + ", ".join(result["compiler_processes"]))
    if not parts:
        return None
    return "the image claims baked kernel caches but compiled at server start: " + "; ".join(parts)


def apart_from_checks(watched: Dict[str, Any], compiled: List[str], by_checks: Set[str]) -> Dict[str, Any]:
    """The server's watch (`compiled`: every file it saw) less the files that changed while one of kernel-smoke's
    checks beside it ran (kernel-smoke's own warning names them, checks_compiled), where no compiler ran in the
    server's session. Whose a file is cannot be read from the file: with a compiler of the server's own the list
    stays whole, and either way each file is named by one warning or the other, never by none."""
    theirs = [p for p in compiled if p in by_checks]
    if watched["compiler_processes"] or not theirs:
        return {}
    rest = [p for p in compiled if p not in by_checks]
    return {"compiled_files": rest[:SHOWN], "compiled_count": len(rest), "compiled_by_checks_beside": theirs[:SHOWN]}


def _arch_number(arch: str) -> str:
    return "".join(re.findall(r"\d", arch))     # sm_90a, sm_90 and 9.0 are one GPU generation: "90"


def _claims(archs: List[Any], gpu_arch: str) -> bool:
    return _arch_number(gpu_arch) in {_arch_number(str(a)) for a in archs}


def cold_start(watched: Dict[str, Any], gpu_arch: str) -> Dict[str, Any]:
    """What a start of a baked profile compiled, judged against the image's claim for this GPU: a warning where
    the image claims this arch (its users were promised no compile at start; the server did come up, so it is
    no failure), a plain record where it does not (the image was never warm for this GPU)."""
    said = verdict(watched, tuple(watched.get("declared_at_start", ())))
    if said is None:
        return {}
    claimed = [str(a) for a in watched.get("archs", [])]
    if _claims(claimed, gpu_arch):
        return {"warnings": [f"{said} (on {gpu_arch}, an arch the image claims baked)"]}
    return {"cold_expected": f"compiled at start on {gpu_arch}: the image bakes {', '.join(claimed) or 'no arch'}"}


def checks_compiled(claim: Dict[str, Any], compiled: Dict[str, List[str]], gpu_arch: str) -> Dict[str, Any]:
    """What kernel-smoke's checks compiled into the image's baked caches (library -> files), judged as a start is:
    they load modules a server loads (FlashInfer's norm) from the same caches in the image's environment, so a
    module they had to build is one the bake does not cover there. A warning naming the library and the modules
    where the image claims this arch, a plain record where it does not."""
    if not compiled:
        return {}
    said = "; ".join(f"{library}: {len(files)} file(s) ({', '.join(_modules(files)[:6])})"
                     for library, files in sorted(compiled.items()))
    claimed = [str(a) for a in claim.get("archs", [])]
    if _claims(claimed, gpu_arch):
        return {"warnings": [f"the image claims baked kernel caches but kernel-smoke compiled into them: {said} "
                             f"(on {gpu_arch}, an arch the image claims baked)"]}
    return {"cold_expected": f"compiled into the caches on {gpu_arch}: the image bakes "
                             f"{', '.join(claimed) or 'no arch'}: {said}"}


def _modules(files: List[str]) -> List[str]:
    """The module folders `files` lie in (FlashInfer's cached_ops/norm, a TVM-FFI module's folder)."""
    return sorted({os.path.basename(os.path.dirname(p)) for p in files})
