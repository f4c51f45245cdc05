"""Remove the POSIX message queues of host mode's identity (standard library only).

  python -I -S mqueue_sweep.py UID GID

Started as root by the verifier (verify/ipc.py) with its own interpreter, isolated. Queues are listed only
through an mqueue file system, and a machine need not have one mounted (/dev/mqueue), so this process mounts
one of its own: in a mount namespace of its own (made private first, so nothing propagates back), over /tmp,
which hides /tmp from this process alone and leaves nothing on any disk; the namespace ends with it. Prints one
JSON line, {"removed": [names], "left": [names and why]}; exit 126 when it could not mount one.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
WHERE = b"/tmp"
CANNOT = 126


def _own_queues() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount(/, MS_REC|MS_PRIVATE)")
    if libc.mount(b"mqueue", WHERE, b"mqueue", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount -t mqueue")


def shown(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isascii() and a.isdigit() for a in argv):
        sys.stderr.write(__doc__ or "")
        return 2
    uid, gid = int(argv[0]), int(argv[1])
    try:
        _own_queues()
    except OSError as exc:
        sys.stderr.write(f"mqueue_sweep: no mqueue file system of its own: {exc}\n")
        return CANNOT
    removed, left = [], []
    for name in os.listdir(WHERE):
        try:
            st = os.lstat(os.path.join(WHERE, name))
            if st.st_uid == uid or st.st_gid == gid:
                os.unlink(os.path.join(WHERE, name))
                removed.append(shown(name))
        except OSError as exc:
            left.append(f"{shown(name)}: {exc.strerror}")
    sys.stdout.write(json.dumps({"removed": removed, "left": left}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
