"""Host mode's clean-up against what a hostile identity really leaves (verify/cleanup.py, docs/trust.md): as the
identity, a tree deeper than any recursion limit in its TMPDIR and its home, a set-uid file in a sticky folder
below /tmp and a hard link to it in a world-writable folder deeper down, a POSIX message queue, SysV shared
memory and a semaphore set, and a process that forked away and named itself in bytes that are not UTF-8; beside
it, another user's process with such a name while the uid is picked. After the run nothing of it is left but its
home, root's; a clean-up that could not finish leaves the run unsealed, says why, and keeps the uid out of use.
Needs root (the identity is given by root); without it the tests are `unavailable` (a failure under CI=true).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.verify import cleanup, host, identity, procs, reap, treewalk
from buildscripts.verify.access import Who
from buildscripts.verify.gpus import Handed
from buildscripts.verify.plan import Plan
from buildscripts.verify.runner import Options
from tests import forged, needs

SYSTEM_PYTHON = "/usr/bin/python3"   # an interpreter others may reach (the test's own may lie below /root)
BAD_NAME = b"\xff\xfe\x80-not-utf8"
QUEUE = b"/sglang-images-test-" + uuid.uuid4().hex[:8].encode()
DEPTH = 1500

IDENTITY = r"""
import ctypes, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
sticky, open_deep, queue = sys.argv[1], sys.argv[2], sys.argv[3].encode()
depth, bad = int(sys.argv[4]), bytes.fromhex(sys.argv[5])

def nest(top):
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(b"dd", dir_fd=fd)
        inner = os.open(b"dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open(b"set-uid", os.O_WRONLY | os.O_CREAT, 0o4755, dir_fd=fd))
    os.close(fd)

nest(os.environ["TMPDIR"])
nest(os.environ["HOME"])
su = os.path.join(sticky, "su")
with open(su, "w") as fh:
    fh.write("#!/bin/sh\n")
os.chmod(su, 0o6755)                         # set-uid and set-gid: whoever runs it would be this identity
os.link(su, os.path.join(open_deep, "link"))  # and a second name for it, deeper down
libc.mq_open.restype = ctypes.c_int
if libc.mq_open(queue, os.O_CREAT | os.O_RDWR, 0o600, None) < 0:
    sys.exit("mq_open: %d" % ctypes.get_errno())
shm = libc.shmget(0, 4096, 0o1000 | 0o600)
sem = libc.semget(0, 1, 0o1000 | 0o600)
child = os.fork()
if child == 0:                               # it forks away and renames itself in bytes no decoder reads
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    libc.prctl(15, ctypes.c_char_p(bad), 0, 0, 0)
    time.sleep(600)
    os._exit(0)
print(json.dumps({"uid": os.getuid(), "shm": shm, "sem": sem, "child": child}))
"""


@pytest.fixture
def as_root() -> None:
    if not identity.is_root():
        needs.unavailable("root", "host mode gives the code under test an identity of its own only as root")
    if not Path(SYSTEM_PYTHON).exists():
        needs.unavailable(SYSTEM_PYTHON, "apt-get install python3")


@pytest.fixture
def other_users_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process of another uid (outside the identities' range) whose name is not UTF-8, running throughout."""
    code = f"import ctypes, time; ctypes.CDLL(None).prctl(15, ctypes.c_char_p({BAD_NAME!r}), 0, 0, 0); time.sleep(600)"
    started = subprocess.Popen([SYSTEM_PYTHON, "-c", code], user=4242, group=4242, extra_groups=[])
    time.sleep(0.5)
    assert BAD_NAME[:15] in Path(f"/proc/{started.pid}/comm").read_bytes()
    yield started
    started.kill()
    started.wait()


def _remove(path: Path) -> None:
    """A folder of any depth gone (pytest's and the fixtures' clean-ups recurse)."""
    if os.path.lexists(path):
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            treewalk.remove_tree(parent, os.fsencode(path.name), treewalk.Budget(), treewalk.Removed())
        finally:
            os.close(parent)


@pytest.fixture
def shared_places() -> Iterator[tuple[Path, Path]]:
    """A sticky folder below /tmp and a world-writable one three levels below it (root's, as others' would be)."""
    base = Path("/tmp") / f"sglang-images-places-{uuid.uuid4().hex[:8]}"
    deep = base / "a" / "b" / "c" / "open"
    deep.mkdir(parents=True)
    for folder in (base, base / "a", base / "a" / "b", base / "a" / "b" / "c"):
        folder.chmod(0o755)
    (base / "sticky").mkdir()
    (base / "sticky").chmod(0o1777)
    deep.chmod(0o777)
    yield base / "sticky", deep
    _remove(base)


def _queue_exists(name: bytes) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mq_open.restype = ctypes.c_int
    fd = libc.mq_open(name, os.O_RDONLY, 0, None)
    if fd >= 0:
        os.close(fd)
        libc.mq_unlink(name)
        return True
    assert ctypes.get_errno() == errno.ENOENT
    return False


def _sysv_ids(kind: str) -> set[int]:
    rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(row.split()[1]) for row in rows if row.split()}


@pytest.mark.usefixtures("as_root")
def test_nothing_the_identity_made_is_left_but_its_home_as_roots(
        open_tmp: Path, shared_places: tuple[Path, Path], other_users_process: subprocess.Popen[bytes]) -> None:
    sticky, deep = shared_places
    workdir = open_tmp / "work"
    try:
        _check_clean_up(sticky, deep, workdir, other_users_process)
    finally:
        _remove(workdir)   # its home: a tree deeper than the fixture's clean-up can remove


def _check_clean_up(sticky: Path, deep: Path, workdir: Path, other_users_process: subprocess.Popen[bytes]) -> None:
    with identity.sandbox(workdir) as lease:      # picked while another user's process has a name of any bytes
        box = lease.box
        made = subprocess.run(box.command([SYSTEM_PYTHON, "-I", "-c", IDENTITY, str(sticky), str(deep),
                                           QUEUE.decode(), str(DEPTH), BAD_NAME.hex()]),
                              env=box.environment(), capture_output=True, text=True, timeout=300, check=False)
        assert made.returncode == 0, made.stderr
        said = json.loads(made.stdout)
        assert said["uid"] == box.uid and procs.processes_of(box.uid, box.gid) == [said["child"]]
        assert (sticky / "su").stat().st_mode & stat.S_ISUID and (deep / "link").stat().st_nlink == 2
    cleaned = lease.cleaned
    assert cleaned is not None
    assert cleaned.finished, cleaned.problems
    assert procs.processes_of(box.uid, box.gid) == [] and other_users_process.poll() is None   # not another's
    assert not (sticky / "su").exists() and not (deep / "link").exists() and not box.tmp.exists()
    assert not _queue_exists(QUEUE)
    assert said["shm"] not in _sysv_ids("shm") and said["sem"] not in _sysv_ids("sem")
    notes = "\n".join(cleaned.notes())
    # set-id: the file deep in its TMPDIR, the one in the sticky folder and its second name (which the clean-up of
    # another host run at the same time may take first: a set-id file that gained a link in a folder its identity
    # could write)
    setid = re.search(r"\((\d+) set-id, (\d+) with other links\)", notes)
    assert "1 process(es)" in notes and setid is not None and int(setid[1]) >= 2, notes
    assert "POSIX message queue" in notes and "SysV shared memory" in notes and "SysV semaphore set" in notes, notes
    assert str(sticky / "su") in notes
    home = box.home
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)      # the home stays, whole and root's, no set-id bit
    try:
        seen: list[os.stat_result] = []

        def visit(d: int, name: bytes, st: os.stat_result) -> bool:
            seen.append(st)
            return True

        cursor = treewalk.Cursor(fd, [(os.fstat(fd).st_dev, os.fstat(fd).st_ino)], [])
        treewalk.walk(cursor, visit, treewalk.Budget())
    finally:
        os.close(cursor.fd)
    assert len(seen) == DEPTH + 1 and {(st.st_uid, st.st_gid) for st in seen} == {(0, 0)}
    assert not any(st.st_mode & (stat.S_ISUID | stat.S_ISGID) for st in seen)
    assert home.stat().st_uid == 0 and stat.S_IMODE(home.stat().st_mode) == 0o700


@pytest.mark.usefixtures("as_root")
def test_a_clean_up_that_cannot_finish_leaves_the_run_unsealed_and_the_uid_out_of_use(
        open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its bound reached (here a bound of 10 entries, as a tree of millions would reach the real one), the sweep
    stops: the run says why it is not sealed, and its uid is not given to a later run."""
    monkeypatch.setattr(cleanup, "Budget", lambda: treewalk.Budget(10, 10))
    plan = Plan.make(archs=["sm_90a"], lane_cuda=None, stages=["facts"], stage_timeout=30)
    done = host.verify_as_identity(str(forged.write(open_tmp)), {}, open_tmp / "work",
                                   Options(plan=plan, log_file=open_tmp / "probe.log", handed=Handed()))
    assert [s.name for s in done.stages] == ["facts"]
    assert done.unsealed is not None and "clean-up after the code under test did not finish" in done.unsealed
    assert "looked at 10 entries" in done.unsealed
    assert any(n.startswith("clean-up not finished") for n in done.notes) and done.notes[-1].startswith("not sealed")
    uid = int(next(n for n in done.notes if "process(es) of uid" in n).split("uid ")[1].split()[0])
    lock = identity.LOCKS / str(uid)
    assert lock.read_bytes().startswith(identity.UNCLEAN) and identity._hold(uid) is None
    finished = cleanup.clean(Who(uid, uid), open_tmp / "work" / "home", since=0.0, budget=treewalk.Budget())
    assert finished.finished, finished.problems       # what this test left is gone; the uid may be used again
    lock.write_bytes(b"")


@pytest.mark.usefixtures("as_root")
def test_processes_of_another_user_never_stop_the_reaping(other_users_process: subprocess.Popen[bytes]) -> None:
    """Reaping an identity reads every process of the machine: one of another user's with a name of any bytes
    is read and left alone."""
    found = reap.reap(65519, 65519, deadline_s=1.0)
    assert found.left == () and other_users_process.poll() is None
    # another test worker may hold a process of 4242 too: this one must be among them
    assert 4242 in procs.ids_in_use() and other_users_process.pid in procs.processes_of(4242)
