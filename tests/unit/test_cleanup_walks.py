"""The clean-up after a host run cannot be stopped by what it cleans up (verify/treewalk.py, procs.py, sweep.py,
ipc.py, access.py, cleanup.py): trees deeper than any recursion limit and any PATH_MAX, names of any bytes, more
entries than its bound, process names that are not UTF-8, and steps that fail, all end in a report, never a
raise. What needs root and real processes is in tests/process/test_host_cleanup.py."""

from __future__ import annotations

import os
import stat
import struct
import sys
from pathlib import Path

import pytest

from buildscripts.verify import access, cleanup, ipc, netns, procs, reap, sweep, treewalk
from buildscripts.verify.access import READ, SEARCH, WRITE, Who
from buildscripts.verify.treewalk import Budget, Cursor

DEPTH = max(1500, sys.getrecursionlimit() + 500)   # each level "dd/" is 3 bytes: past PATH_MAX (4096) too


def nest(top: Path, depth: int = DEPTH, leaf: bytes = b"leaf") -> None:
    """A chain of `depth` folders below `top` (made by name, one level at a time: no path is ever that long)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(b"dd", dir_fd=fd)
        inner = os.open(b"dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def test_a_tree_deeper_than_recursion_and_path_max_is_removed(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()
    nest(tmp_path / "top", leaf=b"\xff\xfe-not-utf8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    (tmp_path / "top" / "link").symlink_to(outside)               # a link is removed, never followed
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    removed = treewalk.Removed()
    try:
        treewalk.remove_tree(parent, b"top", Budget(), removed)
    finally:
        os.close(parent)
    assert not (tmp_path / "top").exists() and (outside / "kept").exists()
    assert removed.folders == DEPTH + 1 and removed.files == 2


def test_a_walk_visits_every_level_and_stops_at_its_bound(tmp_path: Path) -> None:
    nest(tmp_path, depth=DEPTH)
    seen: list[bytes] = []

    def visit(fd: int, name: bytes, st: os.stat_result) -> bool:
        seen.append(name)
        return True

    cursor = Cursor.open(os.fsencode(tmp_path))
    try:
        treewalk.walk(cursor, visit, Budget())
        assert len(seen) == DEPTH + 1 and cursor.depth == 0   # left where it started
        with pytest.raises(treewalk.OverBudget, match="looked at 100 entries"):
            treewalk.walk(cursor, lambda fd, name, st: True, Budget(100, 100))
    finally:
        cursor.close()
        # not left for pytest's own clean-up of old temporary folders, which recurses
        parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        treewalk.remove_tree(parent, b"dd", Budget(), treewalk.Removed())
        os.close(parent)


def test_a_folder_swapped_under_the_walk_stops_it(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    cursor = Cursor.open(os.fsencode(tmp_path / "a"))
    try:
        cursor.down(b"b")
        os.rename(tmp_path / "a", tmp_path / "moved")
        (tmp_path / "a").mkdir()
        cursor.trail[-2] = (cursor.trail[-2][0], cursor.trail[-2][1] + 1)   # what it left is not what it finds
        with pytest.raises(treewalk.Moved):
            cursor.up()
    finally:
        cursor.close()


def status(name: bytes, uids: str, gids: str, state: bytes = b"S (sleeping)") -> bytes:
    return (b"Name:\t" + name + b"\nState:\t" + state + b"\nUid:\t" + uids.encode() + b"\nGid:\t" + gids.encode()
            + b"\nNSpid:\t4242\t7\n")


def fake_proc(root: Path) -> Path:
    entries = {
        "100": status(b"\xff\xfe\x80 bad", "1000 1000 1000 1000", "1000 1000 1000 1000"),
        "101": status(b"ok", "61999 61999 61999 61999", "61999 61999 61999 61999"),
        "102": status(b"zombie", "61999 61999 61999 61999", "61999 61999 61999 61999", b"Z (zombie)"),
        "103": status(b"setgid-run", "1000 1000 1000 1000", "1000 61999 61999 61999"),
        "104": b"Name:\tno ids at all\n",
        "105": status(b"x", "not numbers", "0 0 0 0"),
    }
    for pid, data in entries.items():
        (root / pid).mkdir()
        (root / pid / "status").write_bytes(data)
        (root / pid / "environ").write_bytes(b"A=1\0MARK=yes\0" if pid in ("100", "101") else b"A=1\0")
    (root / "self").mkdir()
    (root / "\udcff").mkdir()          # a name of /proc that is no pid, not even UTF-8
    return root


def test_processes_are_read_as_bytes_whatever_their_names(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    assert sorted(procs.processes_of(61999, 61999, proc)) == [101, 103]        # the zombie runs nothing
    assert procs.processes_of(61999, None, proc) == [101]
    assert procs.ids_in_use(proc) == {1000, 61999}                              # 105: no ids it can read
    assert netns.host_pid(7, "MARK=yes", proc) in (100, 101)
    assert netns.host_pid(7, "MARK=yes", proc, uid=61999) == 101         # host mode: the identity's own only
    assert netns.host_pid(7, "MARK=no", proc) is None


def acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", access.ACL_VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_what_the_identity_may_do_is_read_from_mode_and_acl(tmp_path: Path) -> None:
    who = Who(61999, 61999)
    st = os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 1, 0, 0, 0, 0, 0, 0))
    assert who.may(st, READ | SEARCH) and not who.may(st, WRITE)
    sticky = os.stat_result((stat.S_IFDIR | 0o1777, 0, 0, 1, 0, 0, 0, 0, 0, 0))
    assert who.may(sticky, WRITE | SEARCH)
    granted = acl((access.USER_OBJ, 7, 0), (access.USER, 7, 61999), (access.GROUP_OBJ, 5, 0),
                  (access.MASK, 7, 0), (access.OTHER, 5, 0))
    assert who.may(st, WRITE | SEARCH, granted)                              # a named entry grants it write
    masked = granted.replace(struct.pack("<HHI", access.MASK, 7, 0), struct.pack("<HHI", access.MASK, 5, 0))
    assert not who.may(st, WRITE, masked)
    assert not who.may(st, WRITE, b"\x02\x00")                               # unreadable ACL: the mode rules
    own = os.stat_result((stat.S_IFDIR | 0o500, 61999, 0, 1, 61999, 0, 0, 0, 0, 0))
    assert who.owns(own) and not who.may(own, WRITE)                          # the owner's bits, not others'


def test_the_file_systems_that_hold_no_files_are_found_in_mountinfo() -> None:
    info = (b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
            b"23 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
            b"24 22 0:5 / /proc/sys/fs/binfmt_misc rw - binfmt_misc none rw\n"
            b"25 1 0:30 / /mnt/with\\040space rw shared:1 - tmpfs none rw\n"
            b"garbage line\n")
    assert sweep.skipped_devices(info) == {os.makedev(0, 21), os.makedev(0, 5)}


def test_sysv_tables_are_read_by_their_header() -> None:
    table = (b"       key      shmid perms    size  cpid  lpid nattch   uid   gid  cuid  cgid\n"
             b"         0         11   600    4096     1     0      0 61999 61999     0     0\n"
             b"         0         12   600    4096     1     0      0     0     0 61999     0\n"
             b"         0         13   600    4096     1     0      0     0 61999     0     0\n"
             b"         0         14   600    4096     1     0      0     0     0     0     0\n"
             b"  not a row\n")
    assert ipc.owned(table, 61999, 61999) == [11, 12, 13]
    assert ipc.owned(b"", 1, 1) == [] and ipc.owned(b"no id column\n1 2\n", 1, 1) == []


def test_a_clean_up_whose_steps_fail_still_runs_every_step_and_says_why(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def fails(name: str, exc: BaseException):  # type: ignore[no-untyped-def]
        def step(*args: object, **kwargs: object) -> None:
            ran.append(name)
            raise exc
        return step

    monkeypatch.setattr(reap, "reap", fails("reap", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad name")))
    monkeypatch.setattr(sweep, "sweep", fails("sweep", RecursionError("too deep")))
    monkeypatch.setattr(ipc, "sweep", fails("ipc", OSError(1, "no")))
    report = cleanup.clean(Who(61999, 61999), tmp_path / "no-home", since=0.0)
    assert ran == ["reap", "sweep", "ipc"] and not report.finished
    said = " ".join(report.problems)
    assert "RecursionError" in said and "UnicodeDecodeError" in said
    assert len(report.problems) == 3 and "it had no home yet" in report.notes()[0]   # it stopped before one was made
    assert "did not finish" in (report.why_unsealed() or "") and report.notes()[-1].startswith("clean-up not finished")


def test_a_clean_up_with_nothing_to_do_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reap, "reap", lambda uid, gid: reap.Reaped(0, ()))
    monkeypatch.setattr(sweep, "sweep", lambda who, since, budget: sweep.Swept())
    monkeypatch.setattr(ipc, "sweep", lambda uid, gid: ipc.IpcSwept())
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: None)            # as root it would be root's
    home = tmp_path / "home"
    home.mkdir()
    (home / "made").write_text("x")
    monkeypatch.setattr(cleanup, "_as_roots", lambda fd, name, st: None)
    report = cleanup.clean(Who(os.getuid(), os.getgid()), home, since=0.0)
    assert report.finished and report.why_unsealed() is None and (home / "made").exists()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_processes_left_after_the_deadline_are_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "processes_of", lambda uid, gid: [4242])
    monkeypatch.setattr(reap, "_kill_all_as", lambda uid, gid: "the helper could not start")
    monkeypatch.setattr(reap, "_kill_one", lambda pid, uid, gid: False)
    done = reap.reap(61999, 61999, deadline_s=0.05)
    assert done.left == (4242,) and done.problems == ("the helper could not start",)
