"""The processes of this machine as /proc shows them, read as bytes: any local user can name a process anything
(prctl(PR_SET_NAME) takes any 15 bytes, an executable's file name becomes its name), so nothing here decodes
text, and a process that ends while it is read is simply not there. Used while host mode picks a uid for the
code under test (no process may have it) and while it reaps that uid's processes afterwards (reap.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
GONE = (b"Z", b"X")   # zombie or dead: it runs nothing and holds nothing, only its pid until its parent reaps it


@dataclass(frozen=True)
class Ids:
    """A process's ids: real, effective, saved and file-system uid and gid; its state letter; its NSpid."""

    uids: frozenset[int]
    gids: frozenset[int]
    state: bytes
    nspid: tuple[int, ...]

    @property
    def running(self) -> bool:
        return self.state not in GONE


def parse_status(data: bytes) -> Ids | None:
    """The ids of a /proc/PID/status, or None when it holds no Uid and Gid lines it can read (never raises)."""
    fields: dict[bytes, list[bytes]] = {}
    for line in data.split(b"\n"):
        name, sep, rest = line.partition(b":")
        if sep and name in (b"Uid", b"Gid", b"State", b"NSpid"):
            fields[name] = rest.split()
    try:
        uids = frozenset(int(x) for x in fields[b"Uid"])
        gids = frozenset(int(x) for x in fields[b"Gid"])
        nspid = tuple(int(x) for x in fields.get(b"NSpid", []))
    except (KeyError, ValueError):
        return None
    state = (fields.get(b"State") or [b"?"])[0][:1]
    return Ids(uids, gids, state, nspid)


def ids_of(pid: int, proc: Path = PROC) -> Ids | None:
    """The ids of process `pid`, or None when it is gone (or its status cannot be read)."""
    try:
        data = (proc / str(pid) / "status").read_bytes()
    except OSError:
        return None
    return parse_status(data)


def pids(proc: Path = PROC) -> Iterator[int]:
    """Every pid /proc shows (its folder names that are all digits; a name of any other bytes is skipped)."""
    try:
        with os.scandir(proc) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return
    for name in names:
        if name.isascii() and name.isdigit():
            yield int(name)


def processes_of(uid: int, gid: int | None = None, proc: Path = PROC) -> list[int]:
    """The running pids with `uid` (or `gid`) as any of their real, effective, saved or file-system ids."""
    found = []
    for pid in pids(proc):
        ids = ids_of(pid, proc)
        if ids is not None and ids.running and (uid in ids.uids or (gid is not None and gid in ids.gids)):
            found.append(pid)
    return found


def ids_in_use(proc: Path = PROC) -> set[int]:
    """Every uid and gid some process of this machine has now, read once (not once per candidate id)."""
    used: set[int] = set()
    for pid in pids(proc):
        ids = ids_of(pid, proc)
        if ids is not None:
            used |= ids.uids | ids.gids
    return used
