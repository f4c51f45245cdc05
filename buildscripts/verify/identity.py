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
  verifier. When the probe has ended, every process of that uid is killed (`reap`) before anything is sealed,
  and nothing it made is left as its own (`disown`).
- **Not as root** there is no other identity to give, and host mode is refused (verify/command.py): the code
  under test could read this user's keys, or plant one where a verifier would later take it.
- **The verifier's own environment is never the one under test**: code importable by the verifier runs in it
  (a `.pth` file or a sitecustomize runs at every start), so a run whose interpreter is the verifier's own,
  or that imports from a folder the verifier imports from, is saved unsealed, with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import shutil
import signal
import stat
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..workspace import PROJECT_ROOT

# systemd's range for dynamic users (DynamicUser=): no distribution gives these to accounts.
UID_RANGE = range(61184, 65520)
LOCKS = Path("/run/sglang-images/sandbox-locks")   # /run: root's alone
ENTER = Path(__file__).with_name("enter_sandbox.py")
TMP_ROOT = Path("/tmp")
NAME = "sglang-images-under-test"
REAP_ROUNDS = 50


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


def _taken(uid: int) -> bool:
    """An account, a group or a running process has this id."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return bool(processes_of(uid))


def processes_of(uid: int) -> list[int]:
    """The pids whose real, effective or saved uid is `uid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    if str(uid) in line.split()[1:4]:
                        found.append(int(entry.name))
                    break
        except OSError:
            continue   # gone meanwhile
    return found


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
    """The lock of `uid` held for this run (its descriptor), or None when another run holds it."""
    fd = os.open(_lock_folder() / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def sandbox(workdir: Path) -> Iterator[Sandbox]:
    """A fresh identity for one run, its folder under `workdir`; on the way out every process of it is killed
    and nothing it made is left as its own. Root only (the caller decides: `is_root`)."""
    start = (os.getpid() * 7919) % len(UID_RANGE)   # spread concurrent verifiers over the range
    for offset in range(len(UID_RANGE)):
        uid = UID_RANGE[(start + offset) % len(UID_RANGE)]
        held = _hold(uid)
        if held is None:
            continue
        if not _taken(uid):
            break
        os.close(held)
    else:
        msg = f"no free uid in {UID_RANGE.start}-{UID_RANGE.stop - 1} for the code under test"
        raise ConfigError(msg, hint="end other verifiers of this machine, or free that range")
    home, tmp = workdir / "home", TMP_ROOT / f"sglang-images-{uid}"
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        for folder in (home, tmp):
            _own_folder(folder, uid)
        yield Sandbox(uid, uid, home, tmp)
    finally:
        try:
            reap(uid)
            _remove(tmp)
            disown(uid, home)
        finally:
            os.close(held)


# Where else an identity can leave files behind for later (a set-uid copy of a program, a socket).
SHARED_FOLDERS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


def disown(uid: int, home: Path) -> None:
    """After the run: what the identity made in its home stays for the record, but as root's, with no set-id
    bit and no write for others; what it left in the shared folders is removed. Nothing is left that another
    user could use to become that uid, or that a later run given the same uid would find."""
    for folder, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            _as_roots(Path(folder) / name)
    _as_roots(home)
    for shared in SHARED_FOLDERS:
        with contextlib.suppress(OSError):
            for entry in shared.iterdir():
                with contextlib.suppress(OSError):
                    if entry.lstat().st_uid == uid:
                        _remove(entry)


def _as_roots(path: Path) -> None:
    st = path.lstat()
    os.chown(path, 0, 0, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID | 0o022))


def _remove(path: Path) -> None:
    """`path` gone, whatever an earlier identity left there (a link is removed, never followed)."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _own_folder(folder: Path, uid: int) -> None:
    """`folder` made afresh for `uid` alone (what an earlier identity left there is removed first)."""
    _remove(folder)
    try:
        folder.mkdir(mode=0o700)   # not exist_ok: one made meanwhile by someone else is not ours
    except FileExistsError:
        msg = f"{folder} was made again by someone else while the verifier made it for the code under test"
        raise ConfigError(msg, hint="find out who writes there; verify again") from None
    os.chown(folder, uid, uid, follow_symlinks=False)


def reap(uid: int) -> int:
    """Kill every process of `uid` until none is left; how many were killed. A process that forked away,
    double-forked into the background or waits for the signer is gone before any key is read."""
    killed: set[int] = set()
    for _ in range(REAP_ROUNDS):
        pids = processes_of(uid)
        if not pids:
            return len(killed)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.05)
    msg = f"processes of the code under test (uid {uid}) are still running after {REAP_ROUNDS} rounds of SIGKILL"
    raise ConfigError(msg, hint=f"nothing was sealed; see `ps -u {uid}`")


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


def shared_with_verifier(their_path: Sequence[str]) -> str | None:
    """Why a run whose interpreter imports from `their_path` vouches for nothing (None: it may be sealed): a
    folder on it that the verifier imports from too (a site folder of a venv made with
    --system-site-packages, a PYTHONPATH both were given) holds code that runs in the verifier. The standard
    library and the project's own folder are the verifier's, read-only to the code under test."""
    own = {Path(p).resolve() for p in sys.path if p} - _verifiers_own()
    shared = sorted({str(Path(p).resolve()) for p in their_path if p and Path(p).resolve() in own})
    if shared:
        return (f"the code under test imports from the verifier's own folders ({', '.join(shared)}): what they hold "
                "runs in the verifier too; give the environment under test its own folders")
    return None


def _verifiers_own() -> set[Path]:
    """The standard library and the project: on every interpreter's path, and nothing the code under test wrote."""
    paths = sysconfig.get_paths()
    found = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib")}
    found |= {f / "lib-dynload" for f in set(found)} | {Path(p).resolve() for p in sys.path if p.endswith(".zip")}
    return found | {PROJECT_ROOT.resolve()}
