"""After a host run: the identity's inter-process objects removed. They outlive their processes and live in no
folder: SysV shared memory, semaphores and message queues (listed in /proc/sysvipc, removed with the IPC_RMID
syscalls through ctypes, as util-linux's ipcrm does) and POSIX message queues (mqueue_sweep.py, which mounts an
mqueue file system of its own to list them). The kernel bounds how many there can be (kernel.shmmni, semmni,
msgmni, fs.mqueue.queues_max), so this work is bounded too. Nothing here raises: what could not be removed is
said.
"""

from __future__ import annotations

import ctypes
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc

SYSVIPC = Path("/proc/sysvipc")
IPC_RMID = 0
MQUEUE_SWEEP = Path(__file__).with_name("mqueue_sweep.py")
HELPER_S = 30.0


@dataclass
class IpcSwept:
    """What was removed, by kind ("shared memory 3", "POSIX message queue /q"), and what could not be."""

    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def owned(table: bytes, uid: int, gid: int) -> list[int]:
    """The ids in a /proc/sysvipc table (a header line naming its columns, then one line per object) whose owner
    or creator is `uid`, or whose group is `gid`."""
    lines = table.split(b"\n")
    if not lines:
        return []
    header = lines[0].split()
    try:
        id_column = next(i for i, name in enumerate(header) if name in (b"shmid", b"semid", b"msqid"))
    except StopIteration:
        return []
    ours = {i for i, name in enumerate(header) if name in (b"uid", b"cuid")}
    group = {i for i, name in enumerate(header) if name in (b"gid", b"cgid")}
    found = []
    for line in lines[1:]:
        cells = line.split()
        try:
            values = [int(cell) for cell in cells]
        except ValueError:
            continue
        if len(values) != len(header):
            continue
        if any(values[i] == uid for i in ours) or any(values[i] == gid for i in group):
            found.append(values[id_column])
    return found


def _remove_sysv(kind: str, ident: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if kind == "sem":
        result: int = libc.semctl(ident, 0, IPC_RMID)
    elif kind == "shm":
        result = libc.shmctl(ident, IPC_RMID, None)
    else:
        result = libc.msgctl(ident, IPC_RMID, None)
    return 0 if result == 0 else ctypes.get_errno()


NAMES = {"shm": "SysV shared memory", "sem": "SysV semaphore set", "msg": "SysV message queue"}


def sweep_sysv(uid: int, gid: int, swept: IpcSwept, root: Path = SYSVIPC) -> None:
    for kind, name in NAMES.items():
        try:
            table = (root / kind).read_bytes()
        except OSError as exc:
            if (root / kind).parent.exists():
                swept.problems.append(f"{root / kind} could not be read: {exc.strerror}")
            continue
        for ident in owned(table, uid, gid):
            code = _remove_sysv(kind, ident)
            if code:
                swept.problems.append(f"{name} {ident} could not be removed (errno {code})")
            else:
                swept.removed.append(f"{name} {ident}")


def sweep_mqueues(uid: int, gid: int, swept: IpcSwept) -> None:
    try:
        done = proc.run([sys.executable, "-I", "-S", str(MQUEUE_SWEEP), str(uid), str(gid)], timeout=HELPER_S,
                        env={}, inherit_env=False)
    except Exception as exc:  # the clean-up never stops: said, not raised
        swept.problems.append(f"POSIX message queues were not looked at: {type(exc).__name__}: {exc}")
        return
    try:
        said = json.loads(done.output.strip().splitlines()[-1]) if done.ok else None
    except (ValueError, IndexError):
        said = None
    if not isinstance(said, dict):
        swept.problems.append(f"POSIX message queues were not looked at: {done.tail(3) or 'no answer'}")
        return
    swept.removed += [f"POSIX message queue /{name}" for name in said.get("removed", [])]
    swept.problems += [f"POSIX message queue /{why}" for why in said.get("left", [])]


def sweep(uid: int, gid: int) -> IpcSwept:
    swept = IpcSwept()
    sweep_sysv(uid, gid, swept)
    sweep_mqueues(uid, gid, swept)
    return swept
