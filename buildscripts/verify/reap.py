"""After a host run: every process of the identity killed, in bounded time, without ever raising.

Each round kills them all at once as the identity itself (kill_identity.py: kill(-1), which a fork loop cannot
outrun), then each one left by its pid as root through a pidfd (a pid that ended and was given to another
process meanwhile is never signalled: the pidfd names the process the ids were read from). A process that has
the identity's gid and another uid (one that ran a set-gid file the identity left) is only reachable the second
way. What is still running at the deadline is reported, never raised: the clean-up goes on, and the run is not
sealed (cleanup.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from . import procs

KILL_AS = Path(__file__).with_name("kill_identity.py")
REAP_S = 30.0          # a GPU process may take seconds to leave the driver after SIGKILL; a fork loop none
HELPER_S = 10.0


@dataclass(frozen=True)
class Reaped:
    """How many processes were signalled, and which were still running at the deadline (none: done)."""

    killed: int
    left: tuple[int, ...]
    problems: tuple[str, ...] = ()


def reap(uid: int, gid: int, *, deadline_s: float = REAP_S) -> Reaped:
    """Kill every process with `uid` or `gid` until none is left or `deadline_s` has passed."""
    killed: set[int] = set()
    problems: list[str] = []
    until, pause = time.monotonic() + deadline_s, 0.02
    while True:
        found = procs.processes_of(uid, gid)
        if not found:
            return Reaped(len(killed), (), tuple(problems))
        if time.monotonic() >= until:
            return Reaped(len(killed), tuple(found), tuple(problems))
        problem = _kill_all_as(uid, gid)
        if problem and problem not in problems:
            problems.append(problem)
        for pid in procs.processes_of(uid, gid):
            if _kill_one(pid, uid, gid):
                killed.add(pid)
        killed.update(found)
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _kill_all_as(uid: int, gid: int) -> str | None:
    """kill_identity.py as `uid`; why it failed, or None."""
    try:
        done = proc.run([sys.executable, "-I", "-S", str(KILL_AS), str(uid), str(gid)], timeout=HELPER_S,
                        env={}, inherit_env=False)
    except Exception as exc:  # the clean-up never stops: a helper that cannot start is said, not raised
        return f"the helper that kills as uid {uid} could not start: {type(exc).__name__}: {exc}"
    return None if done.ok else f"the helper that kills as uid {uid} failed: {done.tail(3)}"


def _kill_one(pid: int, uid: int, gid: int) -> bool:
    """SIGKILL to `pid` through a pidfd, if the process it names still has `uid` or `gid`."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False   # gone, or pidfds unknown to this kernel (the helper's kill(-1) still reached it)
    try:
        ids = procs.ids_of(pid)   # read after the pidfd is held: the process it names, not a later one
        if ids is None or not (uid in ids.uids or gid in ids.gids):
            return False
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return True
        return False
    finally:
        os.close(fd)
