"""Start a program in a network namespace of its own, with loopback only (stdlib only).

  python netcut.py -- PROGRAM [ARG...]

What the server stage runs the server under in host and LXC mode, where the server would otherwise
have the machine's network: in a fresh namespace there is no route out (an attempt to fetch a FlashInfer
cubin or a hub file fails at once, as on an air-gapped host), and the server's port can only be reached
by joining that namespace, which the host does. It needs CAP_SYS_ADMIN where it runs; without it the
program starts with the network it has, and this line says why (the host checks the route itself):
  @@netcut {"cut": false, "why": "..."}
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import socket
import struct
import sys
from typing import List, Optional

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PREFIX = "@@netcut "


def cut() -> Optional[str]:
    """Move this process into a new network namespace and bring its loopback up; None, or why not."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            return f"unshare(CLONE_NEWNET): {errno.errorcode.get(code, code)} ({os.strerror(code)})"
    except (OSError, AttributeError) as exc:
        return f"unshare(CLONE_NEWNET) is not available: {exc}"
    # A new namespace's loopback starts down: SGLang's own processes talk over 127.0.0.1.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = _lo_flags(sock)
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))
    return None


def _lo_flags(sock: socket.socket) -> int:
    request = struct.pack("16sH14s", b"lo", 0, b"")
    return int(struct.unpack("16sH14s", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1])


def loopback_up() -> Optional[bool]:
    """Whether this thread's network namespace has its loopback up (None: it cannot be told). Reading the
    flags needs no privilege; an LXC container's own namespace keeps lo down unless something brings it up."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            return bool(_lo_flags(sock) & IFF_UP)
    except OSError:
        return None


def main(argv: List[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        sys.stderr.write(__doc__ or "")
        return 2
    why = cut()
    sys.stdout.write(PREFIX + json.dumps({"cut": why is None, "why": why}) + "\n")
    sys.stdout.flush()
    os.execvp(argv[1], argv[1:])
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
