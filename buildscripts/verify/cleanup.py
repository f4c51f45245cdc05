"""The clean-up after a host run, in host mode's `finally`: whatever the code under test left, it runs to its end,
never raises, and says what it did and what it could not do. A clean-up that did not finish leaves the run
unsealed (host.py), with the reason in its record, and the uid is not handed out again until this machine
restarts (identity.py).

In this order: every process of the identity killed (reap.py); its home made root's and closed to others, so
nothing below it is reachable while the rest goes on; every folder of the machine it could have reached swept
of its entries (sweep.py); its SysV and POSIX inter-process objects removed (ipc.py); what it made in its home
kept for the record as root's, with no set-id bit and no write for others, and a hard link there to a file of
someone else's removed (treewalk.py: iterative, bounded, links never followed).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import ipc, reap, sweep, treewalk
from .access import Who
from .treewalk import Budget, Cursor


@dataclass
class Cleanup:
    """What the clean-up did (`done`) and what it could not (`problems`): both go into the run's record."""

    done: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return not self.problems

    def why_unsealed(self) -> str | None:
        if self.finished:
            return None
        return ("the clean-up after the code under test did not finish, so what it left may still act as its "
                f"identity: {'; '.join(self.problems[:3])}" + (" …" if len(self.problems) > 3 else ""))

    def notes(self) -> list[str]:
        return [f"clean-up: {line}" for line in self.done] + [f"clean-up not finished: {p}" for p in self.problems]


def clean(who: Who, home: Path, *, since: float, budget: Budget | None = None) -> Cleanup:
    """Everything the identity `who` left after a run that started at `since` (epoch seconds), `home` kept."""
    budget = budget or Budget()
    report = Cleanup()
    _step(report, "killing its processes", lambda: _reap(who, report))
    _step(report, f"closing its home {home}", lambda: _close(home))
    _step(report, "sweeping the file systems", lambda: _sweep(who, since, budget, report))
    _step(report, "removing its message queues, semaphores and shared memory", lambda: _ipc(who, report))
    _step(report, f"making its home {home} root's", lambda: _disown(who, home, budget, report))
    return report


def _step(report: Cleanup, what: str, work: Callable[[], None]) -> None:
    try:
        work()
    except Exception as exc:  # whatever the code under test left, the next step still runs
        report.problems.append(f"{what} failed: {type(exc).__name__}: {exc}")


def _reap(who: Who, report: Cleanup) -> None:
    done = reap.reap(who.uid, who.gid)
    report.done.append(f"{done.killed} process(es) of uid {who.uid} or gid {who.gid} killed")
    report.problems += list(done.problems)
    if done.left:
        shown = ", ".join(map(str, done.left[:10]))
        report.problems.append(f"{len(done.left)} process(es) of the identity still ran after {reap.REAP_S:.0f} s "
                               f"of SIGKILL (pids {shown})")


def _close(home: Path) -> None:
    """Home root's and 0700 at once: its entries stay the identity's until _disown, unreachable meanwhile. (No
    home: the run stopped before it was made; the identity cannot remove it from the verifier's folder.)"""
    try:
        fd = os.open(home, treewalk.OPEN_FOLDER)
    except FileNotFoundError:
        return
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _sweep(who: Who, since: float, budget: Budget, report: Cleanup) -> None:
    found = sweep.sweep(who, since=since, budget=budget)
    gone = found.removed
    report.done.append(f"removed {gone.files} file(s) ({gone.setid} set-id, {gone.linked} with other links) and "
                       f"{gone.folders} folder(s) outside its home"
                       + (f": {', '.join(found.shown)}" if found.shown else "")
                       + (f" and {found.more} more" if found.more else ""))
    report.problems += found.problems


def _ipc(who: Who, report: Cleanup) -> None:
    found = ipc.sweep(who.uid, who.gid)
    report.done.append(f"removed {len(found.removed)} inter-process object(s)"
                       + (f": {', '.join(found.removed[:sweep.SHOWN])}" if found.removed else ""))
    report.problems += found.problems


def _disown(who: Who, home: Path, budget: Budget, report: Cleanup) -> None:
    try:
        cursor = Cursor.open(os.fsencode(home))
    except FileNotFoundError:
        report.done.append("it had no home yet")
        return
    unlinked = 0

    def visit(fd: int, name: bytes, st: os.stat_result) -> bool:
        nonlocal unlinked
        if not who.owns(st):
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:   # a link to someone else's file: not its to keep
                os.unlink(name, dir_fd=fd)
                unlinked += 1
            return False
        _as_roots(fd, name, st)
        return True

    try:
        treewalk.walk(cursor, visit, budget)
    finally:
        cursor.close()
    report.done.append(f"its home kept as root's ({unlinked} link(s) to others' files removed)")


def _as_roots(fd: int, name: bytes, st: os.stat_result) -> None:
    """The entry root's, without set-id bits or write for group and others. chmod goes through an O_PATH
    descriptor of the very inode (a name swapped for a link meanwhile could otherwise lead it elsewhere)."""
    os.chown(name, 0, 0, dir_fd=fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return
    path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        now = os.fstat(path_fd)
        if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            os.chmod(f"/proc/self/fd/{path_fd}", stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID | 0o022))
    finally:
        os.close(path_fd)
