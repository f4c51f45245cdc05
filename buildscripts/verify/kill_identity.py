"""Kill every process of host mode's identity at once (standard library only).

  python -I -S kill_identity.py UID GID

Started as root by the verifier (verify/reap.py) with its own interpreter, isolated. It becomes the identity (no
groups, that gid, that uid) and sends SIGKILL to pid -1: every process that uid may signal, in one pass of the
kernel's process list during which no process can fork, so a process that forks faster than it is killed one pid
at a time cannot outrun it. It is not killed itself. Exit 0 when sent (or when there was none to signal), 126
when it could not become the identity.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

CANNOT = 126


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isascii() and a.isdigit() for a in argv):
        sys.stderr.write(__doc__ or "")
        return 2
    uid, gid = int(argv[0]), int(argv[1])
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        sys.stderr.write(f"kill_identity: could not become uid {uid}: {exc}\n")
        return CANNOT
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError as exc:
        if exc.errno != errno.ESRCH:   # ESRCH: no process of it was left to signal
            sys.stderr.write(f"kill_identity: kill(-1): {exc}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
