"""The GPU's device nodes as this process may open them (stdlib only).

Inside an unprivileged LXC container the nodes bound in from the host show their host owner through the
idmap: a node of mode 0660 owned by root:root is nobody:nogroup there, and the container's root may not
open it (its capabilities do not reach an inode whose owner is not mapped). The device cgroup refuses in the
same place (access(2) asks both), and torch then only says it sees no GPU. What is seen here goes into
gpu-visible's evidence, and a node that cannot be opened into its reason, with its mode and owner, so the
failure names the node and the host side can give the fix for the place it ran in.
"""

from __future__ import annotations

import glob
import os
import stat
from typing import Any, Dict, List

REFUSED = "cannot be opened for reading and writing here"   # data/failures.yaml: gpu-node-permission


def observe(pattern: str = "/dev/nvidia*") -> List[Dict[str, Any]]:
    """Each character device matching `pattern`: its mode, owner and group as seen here, and whether this
    process may open it for reading and writing (access(2): mode, owner, capabilities and device cgroup)."""
    found = []
    for path in sorted(glob.glob(pattern)):
        try:
            info = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISCHR(info.st_mode):
            continue
        found.append({"path": path, "mode": "%04o" % stat.S_IMODE(info.st_mode), "uid": info.st_uid,
                      "gid": info.st_gid, "rw": os.access(path, os.R_OK | os.W_OK)})
    return found


def refused(nodes: List[Dict[str, Any]]) -> str:
    """The words for the nodes this process may not open ("" when it may open every one)."""
    bad = [n for n in nodes if not n.get("rw")]
    if not bad:
        return ""
    each = ", ".join("%s (mode %s, owner %s:%s)" % (n["path"], n["mode"], n["uid"], n["gid"]) for n in bad)
    return "%s %s" % (each, REFUSED)
