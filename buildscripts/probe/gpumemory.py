"""GPU memory the GPU stages found free, and a warning when other processes hold most of it.

On a shared runner another job may hold most of the GPU (an H200 with 129.5 of 139.8 GiB taken): the tiny
model of the server stage still fits, so every stage passes, yet nothing was shown about a real model's fit
and the timings are another job's too. The free memory is read by torch (cudaMemGetInfo) right after it
creates its context, before the stage allocates anything: what is used then is other processes' memory
plus this probe's context (a few hundred MiB), so "most of it" (more than half) is never the probe's own.
Standard library only; the numbers come from gpu_stages.GPU_QUERY.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import core

GIB = float(1 << 30)
SHARED_ABOVE = 0.5   # used fraction above which the GPU counts as held by others
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]


def summary(found: Optional[Dict[str, Any]], apps: Optional[List[str]] = None) -> Tuple[Dict[str, Any], Optional[str]]:
    """(evidence, warning or None) from {"free_bytes", "total_bytes"} as torch reported them."""
    if not found or not found.get("total_bytes"):
        return {"error": (found or {}).get("error", "torch did not report the GPU's memory")}, None
    free, total = int(found["free_bytes"]), int(found["total_bytes"])
    used = total - free
    ev: Dict[str, Any] = {"free_bytes": free, "total_bytes": total, "free_gib": round(free / GIB, 1),
                          "total_gib": round(total / GIB, 1), "used_fraction": round(used / total, 3)}
    if apps:
        ev["processes"] = apps
    if used / total <= SHARED_ABOVE:
        return ev, None
    holders = f": {'; '.join(apps)}" if apps else " (nvidia-smi on the host names them; a container sees none)"
    return ev, (f"only {free / GIB:.1f} of {total / GIB:.1f} GiB of GPU memory was free when the GPU stages "
                f"began: {used / GIB:.1f} GiB is held by other processes (and this probe's CUDA context)"
                f"{holders}. The stages ran with a tiny model that "
                "fits anyway, so this run says nothing about a real model's fit and its timings are shared; "
                "verify on an idle GPU (pick one with --gpu) or stop what holds it")


def observe(found: Optional[Dict[str, Any]]) -> Tuple[Dict[str, Any], Optional[str]]:
    """summary(), with the processes nvidia-smi lists on the GPU when others hold most of it."""
    ev, crowded = summary(found)
    if crowded is None:
        return ev, None
    listed = core.sh(APPS_QUERY, timeout=60)
    apps = [ln.strip() for ln in (listed.stdout or "").splitlines() if ln.strip()] if listed.returncode == 0 else []
    return summary(found, apps)
