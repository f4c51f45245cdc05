"""Walking trees the code under test made, whatever it made: no recursion (a folder a million levels deep is a
loop, not a stack), one open folder at a time (going down by name, up by "..", each step checked by device and
inode, so a deep tree needs no descriptor per level and no path longer than PATH_MAX), names as bytes (any
bytes but "/" and NUL make a name), links never followed, and a stated bound on the work (`Budget`): past it the
walk stops and says so instead of running on.

The walks run after the identity's processes were killed, on folders nobody else may change (its own, or
root's); a step that finds something other than what it left (a folder swapped meanwhile) stops the walk
(`Moved`) rather than acting on the wrong file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_ENTRIES = 5_000_000   # entries one clean-up may look at, all walks together


class Moved(Exception):
    """A folder was not what the walk left there: it stops rather than act on another file."""


class OverBudget(Exception):
    """The walk reached its bound (Budget) before it finished."""


@dataclass
class Budget:
    """How many more entries the walks may look at; past it they stop (OverBudget)."""

    left: int = MAX_ENTRIES
    bound: int = MAX_ENTRIES

    def spend(self, count: int = 1) -> None:
        self.left -= count
        if self.left < 0:
            msg = f"it looked at {self.bound:,} entries, its bound, and stopped"
            raise OverBudget(msg)


@dataclass
class Cursor:
    """One open folder, moved down by name and up by ".."; `trail` is the (device, inode) of every folder on the
    way down, `names` their names, so a step up can be checked."""

    fd: int
    trail: list[tuple[int, int]] = field(default_factory=list)
    names: list[bytes] = field(default_factory=list)

    @classmethod
    def open(cls, name: bytes | str, dir_fd: int | None = None) -> Cursor:
        fd = os.open(name, OPEN_FOLDER, dir_fd=dir_fd)
        st = os.fstat(fd)
        return cls(fd, [(st.st_dev, st.st_ino)], [])

    @property
    def depth(self) -> int:
        return len(self.names)

    def down(self, name: bytes) -> os.stat_result:
        """Into the sub-folder `name` (never through a link); its stat."""
        fd = os.open(name, OPEN_FOLDER, dir_fd=self.fd)
        st = os.fstat(fd)
        os.close(self.fd)
        self.fd = fd
        self.trail.append((st.st_dev, st.st_ino))
        self.names.append(name)
        return st

    def up(self) -> bytes:
        """Back to the folder above; the name of the one it left."""
        fd = os.open(b"..", OPEN_FOLDER, dir_fd=self.fd)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.trail[-2]:
            os.close(fd)
            msg = "a folder was moved while the clean-up walked it"
            raise Moved(msg)
        os.close(self.fd)
        self.fd = fd
        self.trail.pop()
        return self.names.pop()

    def close(self) -> None:
        os.close(self.fd)


def names_in(fd: int, budget: Budget) -> list[bytes]:
    """The entries of the open folder `fd` (charged to `budget` as they are read)."""
    found = []
    with os.scandir(fd) as entries:   # on a copy of `fd`: this one stays open
        for entry in entries:
            budget.spend()
            found.append(os.fsencode(entry.name))
    return found


def lstat_at(fd: int, name: bytes) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return None


Visit = Callable[[int, bytes, os.stat_result], bool]


def walk(top: Cursor, visit: Visit, budget: Budget) -> None:
    """Every entry below `top`, depth first: `visit(folder_fd, name, stat)` for each, which says (True) whether
    to go into it when it is a folder. `top` is left where it started."""
    pending = [names_in(top.fd, budget)]
    start = top.depth
    while pending:
        if not pending[-1]:
            pending.pop()
            if top.depth > start:
                top.up()
            continue
        name = pending[-1].pop()
        st = lstat_at(top.fd, name)
        if st is None or not visit(top.fd, name, st) or not stat.S_ISDIR(st.st_mode):
            continue
        try:
            top.down(name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        pending.append(names_in(top.fd, budget))


@dataclass
class Removed:
    """What a removal took away: files (and links, sockets, fifos), folders, set-id files, files that had other
    links (a hard link of one of them, or to one)."""

    files: int = 0
    folders: int = 0
    setid: int = 0
    linked: int = 0

    def count(self, st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode):
            self.folders += 1
            return
        self.files += 1
        self.setid += bool(stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID))
        self.linked += st.st_nlink > 1


def remove_tree(dir_fd: int, name: bytes, budget: Budget, removed: Removed) -> None:
    """The entry `name` of the open folder `dir_fd` removed, a folder with all it holds (post-order, iterative),
    counted into `removed`. A link is removed, never followed."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        removed.count(st)
        return
    cursor = Cursor.open(name, dir_fd)
    try:
        pending = [names_in(cursor.fd, budget)]
        while pending:
            if pending[-1]:
                child = pending[-1].pop()
                found = lstat_at(cursor.fd, child)
                if found is not None and stat.S_ISDIR(found.st_mode):
                    cursor.down(child)
                    pending.append(names_in(cursor.fd, budget))
                elif found is not None:
                    os.unlink(child, dir_fd=cursor.fd)
                    removed.count(found)
                continue
            pending.pop()
            if cursor.depth:
                left = cursor.up()
                os.rmdir(left, dir_fd=cursor.fd)
                removed.folders += 1
    finally:
        cursor.close()
    os.rmdir(name, dir_fd=dir_fd)
    removed.folders += 1
