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
  verifier. When the probe has ended, every process of that uid is killed (`reap`) before anything is sealed.
- **Not as root** there is no other identity to give: the run goes ahead only while no signing key is within
  that user's reach (trust/keys.reachable), and its record is saved unsealed.
- **The verifier's own environment is never the one under test**: code importable by the verifier runs in it
  (a `.pth` file or a sitecustomize runs at every start), so a run whose interpreter is the verifier's own,
  or that hands the code under test the verifier's own import path, is saved unsealed, with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

# systemd's range for dynamic users (DynamicUser=): no distribution gives these to accounts.
UID_RANGE = range(61184, 65520)
LOCKS = Path("/run/lock/sglang-images-sandbox")
ENTER = Path(__file__).with_name("enter_sandbox.py")
NAME = "sglang-images-under-test"
REAP_ROUNDS = 50


@dataclass(frozen=True)
class Sandbox:
    """The identity the code under test runs as, and its own folder (HOME, caches, the probe's files)."""

    uid: int
    gid: int
    home: Path

    def environment(self) -> dict[str, str]:
        """What the identity's environment says about it: no account exists for it, so name it here (getpass
        and the caches of torch, Triton and FlashInfer read these)."""
        return {"HOME": str(self.home), "USER": NAME, "LOGNAME": NAME, "XDG_CACHE_HOME": str(self.home / ".cache"),
                "TMPDIR": str(self.home / "tmp")}

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


@contextlib.contextmanager
def sandbox(workdir: Path) -> Iterator[Sandbox]:
    """A fresh identity for one run, its folder under `workdir`; every process of it killed on the way out.
    Root only (the caller decides: `is_root`)."""
    LOCKS.mkdir(parents=True, exist_ok=True, mode=0o700)
    start = (os.getpid() * 7919) % len(UID_RANGE)   # spread concurrent verifiers over the range
    for offset in range(len(UID_RANGE)):
        uid = UID_RANGE[(start + offset) % len(UID_RANGE)]
        handle = (LOCKS / str(uid)).open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        if _taken(uid):
            handle.close()
            continue
        break
    else:
        msg = f"no free uid in {UID_RANGE.start}-{UID_RANGE.stop - 1} for the code under test"
        raise ConfigError(msg, hint="end other verifiers of this machine, or free that range")
    home = workdir / "home"
    try:
        _own_folder(workdir, home, uid)
        yield Sandbox(uid, uid, home)
    finally:
        try:
            reap(uid)
        finally:
            handle.close()


def _own_folder(workdir: Path, home: Path, uid: int) -> None:
    """`home` (and its tmp/) made afresh for `uid` alone (what an earlier identity left there is removed, links
    not followed); the folders above it only let it pass."""
    workdir.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(home):
        if home.is_symlink() or not home.is_dir():
            home.unlink()
        else:
            shutil.rmtree(home)
    for made in (home, home / "tmp"):
        made.mkdir(mode=0o700)
        os.chown(made, uid, uid, follow_symlinks=False)


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


def why_unsealed(python: str, handed_path: str) -> str | None:
    """Why a host run of the interpreter `python`, given `handed_path` as PYTHONPATH, vouches for nothing
    (None: it may be sealed). What the code under test can change in the verifier's own environment runs
    in the verifier."""
    if not is_root():
        return ("host mode as a user other than root runs the code under test as the verifier's own user: "
                "no boundary keeps it from that user's keys")
    ours = Path(sys.prefix).resolve()
    theirs = Path(python).absolute().parent.parent.resolve()
    if theirs == ours:
        return (f"the interpreter under test ({python}) is the verifier's own environment ({ours}): its packages "
                "run in the verifier too; run the verifier from an environment of its own")
    own = {Path(p).resolve() for p in sys.path if p}
    shared = [p for p in handed_path.split(os.pathsep) if p and Path(p).resolve() in own]
    if shared:
        return (f"the code under test is handed the verifier's own import path ({', '.join(shared)}): what it "
                "holds runs in the verifier too; give the environment under test its own folders")
    return None


# Names of variables that hold secrets by convention (a CI's tokens, a registry's password, this project's
# signing key): never handed to the code under test, whoever it runs as.
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")


def handed_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of `env` the code under test may see: everything but variables whose names say they hold a
    secret, and the project's own settings (the verifier's, not the probe's)."""
    return {name: value for name, value in env.items()
            if not any(word in name.upper() for word in SECRET_WORDS)
            and not (name.startswith("SGLANG_IMAGES_") and name not in HANDED_SETTINGS)}


# The project's variables the probe reads (probe/pruned.py, probe/warmcheck.py) and the run's marker.
HANDED_SETTINGS = frozenset({"SGLANG_IMAGES_FATBIN_REPORTS", "SGLANG_IMAGES_WARM_REPORT", "SGLANG_IMAGES_VERIFICATION"})
