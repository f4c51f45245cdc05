"""/dev/shm where the probe runs: its size, and a warning when it is below what NCCL needs.

NCCL's processes talk through shared-memory segments in /dev/shm, one of about 4 to 10 MB per peer and
channel ("Error while creating shared memory segment /dev/shm/nccl-... (size 7340384)"), so Docker's
default of 64 MiB runs out as soon as a server spans a few GPUs; NCCL's troubleshooting guide asks for
`--shm-size=1g --ulimit memlock=-1` in containers (docs.nvidia.com/deeplearning/nccl/user-guide/docs/
troubleshooting/runtime_and_mpi_issues.html, "Shared memory"). 1 GiB is that floor; 16 GiB is what this project's
verification containers get and recommend (SGLang's own queues and torch's tensor sharing use /dev/shm
too). Standard library only.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

PATH = "/dev/shm"
NCCL_FLOOR = 1 << 30
GIB = float(1 << 30)
# How to give a container more, by where the probe runs (core.Context.mode).
FIXES = {
    "container": "run the container with `--shm-size 16g` (or `--ipc=host`, the host's /dev/shm)",
    "lxc": ("add `lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0` to the "
            "container's config (Proxmox: /etc/pve/lxc/CTID.conf) and restart it"),
    "host": "remount it larger (`mount -o remount,size=16G /dev/shm`, or the size= option in /etc/fstab)",
}


def measure(path: str = PATH) -> Dict[str, Any]:
    """Size and free space of `path`, and the file system it is (tmpfs, or the host's when shared)."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"path": path, "error": f"{type(exc).__name__}: {exc.strerror or exc}"}
    found: Dict[str, Any] = {"path": path, "total_bytes": st.f_blocks * st.f_frsize,
                             "free_bytes": st.f_bavail * st.f_frsize}
    found["total_gib"] = round(found["total_bytes"] / GIB, 2)
    found["free_gib"] = round(found["free_bytes"] / GIB, 2)
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 3 and fields[1] == path:
                    found.update(fstype=fields[2], options=fields[3])
    except OSError:
        pass
    return found


def warning(found: Dict[str, Any], mode: str) -> Optional[str]:
    """What to tell the user when /dev/shm is missing or below NCCL's floor, with the fix for `mode`."""
    fix = FIXES.get(mode, FIXES["container"])
    if "error" in found:
        return (f"no usable {found['path']} ({found['error']}): NCCL, SGLang and torch need shared memory for "
                f"a server on more than one GPU; {fix}")
    total = found["total_bytes"]
    if total >= NCCL_FLOOR:
        return None
    return (f"{found['path']} is {total / (1 << 20):.0f} MiB, below the 1 GiB NCCL needs for a server on more "
            f"than one GPU (its shared-memory segments are 4-10 MB per peer and channel; NCCL's guide asks for "
            f"--shm-size=1g); {fix}")
