"""One reader of /proc/PID/stat for the probe (stdlib only)."""

from __future__ import annotations

from typing import List, Optional


def fields(pid: str) -> Optional[List[bytes]]:
    """The fields of /proc/PID/stat after the process's name, its state first (then ppid, process group,
    session, ...); None when the process is gone. Bytes, cut at the last ")": the name in parentheses is
    whatever a process of the machine set (prctl), UTF-8 or not, spaces and parentheses included."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 1:].split()
