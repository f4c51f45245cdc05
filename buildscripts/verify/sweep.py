"""After a host run: nothing of the identity's left in any folder of this machine, found by looking, not by a
list of the usual places.

Every mounted file system is walked from / (but those that hold no files of anyone: proc, sysfs, cgroup …; its
POSIX message queues go through ipc.py), into every folder the identity could search (its mode bits and POSIX
ACL, read by the verifier: treewalk.py, access.py), so every place it could have reached is looked at:
world-writable and sticky folders at any depth, a folder of another user's that grants it write by ACL. There,
every entry of its uid or gid goes (a folder with all it holds): its files, its set-uid and set-gid files, the
hard links it made to its files (same inode, same owner), its sockets and fifos. In a folder it may write, a
set-id file of another owner that gained a link during the run goes too (a hard link to someone's set-uid program,
kept to run after a fix). Folders it could not search it could not have written below; they are not entered.
The walk is bounded (treewalk.Budget); past the bound it stops and says so.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from . import treewalk
from .access import SEARCH, WRITE, Who, acl_of
from .treewalk import Budget, Cursor

# File systems that hold nobody's files (kernel views and controls), and mqueue (ipc.py lists queues itself).
NO_FILES = frozenset({b"proc", b"sysfs", b"cgroup", b"cgroup2", b"devpts", b"debugfs", b"tracefs", b"securityfs",
                      b"pstore", b"bpf", b"configfs", b"fusectl", b"binfmt_misc", b"autofs", b"efivarfs", b"nsfs",
                      b"rpc_pipefs", b"mqueue", b"selinuxfs"})
MOUNTINFO = "/proc/self/mountinfo"
SHOWN = 20   # paths named in the record; the rest are counted


@dataclass
class Swept:
    """What the walk removed and what it could not do."""

    removed: treewalk.Removed = field(default_factory=treewalk.Removed)
    shown: list[str] = field(default_factory=list)
    more: int = 0
    problems: list[str] = field(default_factory=list)

    def note(self, path: bytes) -> None:
        if len(self.shown) < SHOWN:
            self.shown.append(path.decode("utf-8", "backslashreplace"))
        else:
            self.more += 1


def skipped_devices(mountinfo: bytes) -> set[int]:
    """The devices of the mounts whose file system holds no files of anyone (NO_FILES), from /proc/self/mountinfo
    (its third field is the device, major:minor; the type follows the " - " separator)."""
    found = set()
    for line in mountinfo.split(b"\n"):
        fields, sep, rest = line.partition(b" - ")
        parts = fields.split()
        if not sep or len(parts) < 3 or not rest.split() or rest.split()[0] not in NO_FILES:
            continue
        match = re.fullmatch(rb"(\d+):(\d+)", parts[2])
        if match:
            found.add(os.makedev(int(match[1]), int(match[2])))
    return found


def _path(cursor: Cursor, name: bytes) -> bytes:
    return b"/" + b"/".join([*cursor.names, name])


def sweep(who: Who, *, since: float, budget: Budget, root: bytes = b"/", skip: set[int] | None = None) -> Swept:
    """Walk from `root`; remove every entry of `who` in the folders it could search, and a set-id file that gained a
    link since `since` (epoch seconds) in those it could write. Never raises: what it could not do is said."""
    swept = Swept()
    if skip is None:
        try:
            with open(MOUNTINFO, "rb") as fh:
                skip = skipped_devices(fh.read())
        except OSError as exc:
            skip = set()
            swept.problems.append(f"the mounted file systems could not be read ({exc.strerror}): all were walked")
    try:
        cursor = Cursor.open(root)
    except OSError as exc:
        swept.problems.append(f"{os.fsdecode(root)} could not be opened: {exc.strerror}")
        return swept
    prefix = root.rstrip(b"/")
    try:
        _walk(cursor, who, since, budget, skip, swept, prefix)
    except (treewalk.OverBudget, treewalk.Moved) as exc:
        swept.problems.append(f"the walk of the file systems did not finish: {exc}")
    except OSError as exc:
        swept.problems.append(f"the walk of the file systems did not finish: {exc}")
    finally:
        cursor.close()
    return swept


def _walk(cursor: Cursor, who: Who, since: float, budget: Budget, skip: set[int], swept: Swept,
          prefix: bytes) -> None:
    pending = [_listing(cursor, who, budget)]
    while pending:
        writable, names = pending[-1]
        if not names:
            pending.pop()
            if cursor.depth:
                cursor.up()
            continue
        name = names.pop()
        st = treewalk.lstat_at(cursor.fd, name)
        if st is None:
            continue
        if who.owns(st) or (writable and _setid_linked_since(st, since)):
            _remove(cursor, name, budget, swept, prefix)
        elif stat.S_ISDIR(st.st_mode) and st.st_dev not in skip and _enter(cursor, name, who):
            pending.append(_listing(cursor, who, budget))


def _listing(cursor: Cursor, who: Who, budget: Budget) -> tuple[bool, list[bytes]]:
    """(whether the identity may add entries to the folder the cursor is in, its entries)."""
    st = os.fstat(cursor.fd)
    return who.may(st, WRITE | SEARCH, acl_of(cursor.fd)), treewalk.names_in(cursor.fd, budget)


def _enter(cursor: Cursor, name: bytes, who: Who) -> bool:
    """Into `name` when the identity could search it (else the cursor stays)."""
    try:
        st = cursor.down(name)
    except OSError:
        return False
    if who.may(st, SEARCH, acl_of(cursor.fd)):
        return True
    cursor.up()
    return False


def _setid_linked_since(st: os.stat_result, since: float) -> bool:
    return (stat.S_ISREG(st.st_mode) and bool(st.st_mode & (stat.S_ISUID | stat.S_ISGID)) and st.st_nlink > 1
            and st.st_ctime >= since)


def _remove(cursor: Cursor, name: bytes, budget: Budget, swept: Swept, prefix: bytes) -> None:
    path = prefix + _path(cursor, name)
    try:
        treewalk.remove_tree(cursor.fd, name, budget, swept.removed)
    except treewalk.OverBudget:
        raise
    except (OSError, treewalk.Moved) as exc:
        swept.problems.append(f"{path.decode('utf-8', 'backslashreplace')} could not be removed: {exc}")
        return
    swept.note(path)
