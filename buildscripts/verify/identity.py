"""Who the code under test runs as outside a container (host mode), and whether its record may be sealed.

The code under test (the interpreter and packages that `verify --host` judges, and every process they start)
is assumed hostile and clever. Run as the verifier's user it could read every key that user holds: the CI
secret in any of that user's /proc/PID/environ (the *initial* environment: emptying a variable later does not
remove it there), the machine key's file, the verifier's memory through ptrace, and it could leave files or
processes behind for later. So:

- **As root**, the code under test runs as an identity of its own (`Sandbox`): a uid and gid that no account
  and no running process of this machine has (from the range systemd keeps for dynamic users), held by a lock
  for the run, with no supplementary groups and no new privileges (a setuid program does not raise it), in a
  network namespace of its own with only loopback up (no route out; NCCL and the server use loopback), its
  HOME a folder of its own. It cannot read root's files, /proc/PID/environ or memory, nor signal or trace the
  verifier. When the probe has ended, the clean-up (cleanup.py) kills every process of it, sweeps every folder
  it could have reached and its inter-process objects, and keeps its home as root's; it never raises, and a
  clean-up that did not finish leaves the run unsealed and its uid out of use until this machine restarts.
- **Not as root** there is no other identity to give, and host mode is refused (verify/command.py): the code
  under test could read this user's keys, or plant one where a verifier would later take it.
- **The verifier's own environment is never the one under test**: code importable by the verifier runs in it
  (a `.pth` file or a sitecustomize runs at every start), so a run whose interpreter is the verifier's own
  (`why_unsealed`), or whose environment shares a folder with the verifier's imports (apart.py, decided from what
  the verifier hands on and can stat, never asked of the code under test), is saved unsealed, with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import stat
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from . import cleanup, procs, treewalk
from .access import Who
from .cleanup import Cleanup

# systemd's range for dynamic users (DynamicUser=): no distribution gives these to accounts.
UID_RANGE = range(61184, 65520)
LOCKS = Path("/run/sglang-images/sandbox-locks")   # /run: root's alone
ENTER = Path(__file__).with_name("enter_sandbox.py")
TMP_ROOT = Path("/tmp")
NAME = "sglang-images-under-test"
UNCLEAN = b"unclean"   # the first bytes of a uid's lock file once a clean-up after it did not finish


@dataclass(frozen=True)
class Sandbox:
    """The identity the code under test runs as, and its own folder (HOME, caches, the probe's files)."""

    uid: int
    gid: int
    home: Path
    tmp: Path    # short: SGLang's ZeroMQ sockets live under TMPDIR, and a socket path has 107 bytes at most

    def environment(self) -> dict[str, str]:
        """What the identity's environment says about it: no account exists for it, so name it here (getpass
        and the caches of torch, Triton and FlashInfer read these)."""
        return {"HOME": str(self.home), "USER": NAME, "LOGNAME": NAME, "XDG_CACHE_HOME": str(self.home / ".cache"),
                "TMPDIR": str(self.tmp)}

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run as this identity: the verifier's own interpreter (isolated: no site, no environment)
        gives the child a network namespace of its own while it is still root, then the identity, for good,
        with no new privileges, and only then runs `argv` (verify/enter_sandbox.py)."""
        return [sys.executable, "-I", "-S", str(ENTER), str(self.uid), str(self.gid), "--", *argv]


def is_root() -> bool:
    return os.geteuid() == 0


def _taken(uid: int, in_use: set[int]) -> bool:
    """An account or a group has this id, or a running process has it as a uid or gid (`in_use`: procs.py)."""
    if uid in in_use:
        return True
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def _lock_folder() -> Path:
    """LOCKS, made by root for root alone: a folder someone else made first (or a link) could hand two runs one
    uid, or lead root's writes elsewhere."""
    LOCKS.mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in (LOCKS.parent, LOCKS):
        st = folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            msg = f"{folder} is not a folder of root's that only root may write"
            raise ConfigError(msg, hint=f"remove it (root makes it again): rm -rf {folder}")
    return LOCKS


def _hold(uid: int) -> int | None:
    """The lock of `uid` held for this run (its descriptor), or None when another run holds it, or when a run
    given it could not clean up after its code under test (UNCLEAN: it stays out of use until /run is emptied
    at the next start of this machine)."""
    fd = os.open(_lock_folder() / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.pread(fd, len(UNCLEAN), 0) == UNCLEAN:
            os.close(fd)
            return None
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _release(fd: int, cleaned: Cleanup) -> None:
    """The uid's lock let go; marked UNCLEAN first when its clean-up did not finish."""
    try:
        if not cleaned.finished:
            os.pwrite(fd, UNCLEAN + b": " + "; ".join(cleaned.problems).encode(errors="backslashreplace")[:4000], 0)
    finally:
        os.close(fd)


@dataclass
class Lease:
    """One run's identity; `cleaned` says what the clean-up did once the run is over."""

    box: Sandbox
    cleaned: Cleanup | None = None


@contextlib.contextmanager
def sandbox(workdir: Path) -> Iterator[Lease]:
    """A fresh identity for one run, its folder under `workdir`; on the way out every process of it is killed
    and nothing it made is left as its own (cleanup.py: it never raises, and says what it could not do). Root
    only (the caller decides: `is_root`)."""
    uid, held = _pick()
    home, tmp = workdir / "home", TMP_ROOT / f"sglang-images-{uid}"
    lease = Lease(Sandbox(uid, uid, home, tmp))
    since = time.time()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        for folder in (home, tmp):
            _own_folder(folder, uid)
        yield lease
    finally:
        lease.cleaned = cleanup.clean(Who(uid, uid), home, since=since)
        _release(held, lease.cleaned)


def _pick() -> tuple[int, int]:
    """A uid of UID_RANGE that no account, group, process or other run has, and its lock's descriptor."""
    in_use = procs.ids_in_use()
    start = (os.getpid() * 7919) % len(UID_RANGE)   # spread concurrent verifiers over the range
    for offset in range(len(UID_RANGE)):
        uid = UID_RANGE[(start + offset) % len(UID_RANGE)]
        if _taken(uid, in_use):
            continue
        held = _hold(uid)
        if held is None:
            continue
        if not procs.processes_of(uid, uid):   # read again once held: one started meanwhile
            return uid, held
        os.close(held)
    msg = f"no free uid in {UID_RANGE.start}-{UID_RANGE.stop - 1} for the code under test"
    raise ConfigError(msg, hint="end other verifiers of this machine, or free that range (a uid whose clean-up "
                                f"did not finish stays out of use until restart: {LOCKS})")


def _remove(path: Path) -> None:
    """`path` gone, whatever an earlier identity or another user left there (a link is removed, never followed;
    a folder of any depth)."""
    parent = os.open(path.parent, treewalk.OPEN_FOLDER)
    try:
        treewalk.remove_tree(parent, os.fsencode(path.name), treewalk.Budget(), treewalk.Removed())
    finally:
        os.close(parent)


def _own_folder(folder: Path, uid: int) -> None:
    """`folder` made afresh for `uid` alone (what an earlier identity left there is removed first)."""
    try:
        _remove(folder)
    except (OSError, treewalk.OverBudget, treewalk.Moved) as exc:
        msg = f"{folder} holds what an earlier run or another user left, and it could not be removed: {exc}"
        raise ConfigError(msg, hint=f"remove it by hand (rm -rf {folder}); verify again") from None
    try:
        folder.mkdir(mode=0o700)   # not exist_ok: one made meanwhile by someone else is not ours
    except FileExistsError:
        msg = f"{folder} was made again by someone else while the verifier made it for the code under test"
        raise ConfigError(msg, hint="find out who writes there; verify again") from None
    os.chown(folder, uid, uid, follow_symlinks=False)


def unreachable(paths: Mapping[str, Path]) -> str | None:
    """Which of `paths` (what the code under test must read: its interpreter, the probe) an identity with no
    account cannot reach (a folder on the way that others may not enter, a file others may not read)."""
    for what, given in paths.items():
        path = given.resolve()   # a venv's python is a link: what must be reached is where it leads
        for folder in reversed(path.parents):
            mode = folder.stat().st_mode if folder.exists() else 0o777
            if not mode & 0o001:
                return f"{what} {path}: the folder {folder} does not let others pass (mode {mode & 0o777:o})"
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            return f"{what} {path}: {exc.strerror}"
        if not mode & 0o004 and not (path.is_dir() and mode & 0o001):
            return f"{what} {path}: others may not read it (mode {mode & 0o777:o})"
    return None


def why_unsealed(python: str) -> str | None:
    """Why a host run of the interpreter `python` vouches for nothing before it starts (None: it may be sealed):
    the verifier's own environment is not one to judge, since what it holds runs in the verifier too."""
    ours = Path(sys.prefix).resolve()
    if Path(python).absolute().parent.parent.resolve() == ours:
        return (f"the interpreter under test ({python}) is the verifier's own environment ({ours}): its packages "
                "run in the verifier too; run the verifier from an environment of its own")
    return None
