"""Run a program as the identity the code under test gets in host mode (standard library only).

  python -I -S enter_sandbox.py UID GID -- PROGRAM [ARG...]

Started as root by the verifier (verify/identity.py) with its own interpreter, isolated (-I -S: nothing of the
environment or of any site folder is imported). In this order, each step a point of no return: a network
namespace of its own with loopback up (probe/netcut.py: no route out; the host joins it to reach the server),
no supplementary groups, the gid and uid (real, effective and saved), no new privileges (a setuid or
file-capability program does not raise it again), a umask that keeps its files its own; then PROGRAM replaces
this process. Any step that fails ends it with status 126 and the reason on stderr, before PROGRAM runs.
"""

from __future__ import annotations

import ctypes
import os
import sys

# isolated mode puts no folder of ours on sys.path: the project's root, for the probe's own netcut (stdlib only)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from buildscripts.probe import netcut

PR_SET_NO_NEW_PRIVS = 38
CANNOT = 126


def enter(uid: int, gid: int) -> None:
    why = netcut.cut()
    if why is not None:
        msg = f"no network namespace of its own: {why}"
        raise OSError(msg)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid or os.getgroups():
        msg = "the identity did not take"
        raise OSError(msg)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.umask(0o077)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or not (argv[0].isdigit() and argv[1].isdigit()):
        sys.stderr.write(__doc__ or "")
        return 2
    try:
        enter(int(argv[0]), int(argv[1]))
    except OSError as exc:
        sys.stderr.write(f"enter_sandbox: the code under test was not started: {exc}\n")
        return CANNOT
    try:
        os.execvp(argv[3], argv[3:])
    except OSError as exc:
        sys.stderr.write(f"enter_sandbox: {argv[3]!r} could not be started: {exc.strerror}\n")
    return CANNOT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
