"""Reaching a server inside another network namespace with the host's own Python, and whether that
namespace has a route out.

A verification container started with `network_mode: none`, and a server the probe started under
probe/netcut.py, have loopback only: nothing goes out, nothing comes in from outside. The host joins
such a namespace in one short-lived thread (setns(2) moves the calling thread only), opens the TCP
connection there and hands the socket back; a socket stays in the namespace it was made in. That needs
Linux, CAP_SYS_ADMIN (root) and the namespace's process on this machine (a local engine): `problem()`
says when it cannot work, and the callers then keep the network and say so.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..probe.threads import run_in_thread
from . import procs

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
OWN = "/proc/self/ns/net"
# Documentation addresses (RFC 5737, RFC 3849): asking for a route to them sends nothing anywhere.
OUTSIDE = (("192.0.2.1", socket.AF_INET), ("2001:db8::1", socket.AF_INET6))


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns(CLONE_NEWNET): {os.strerror(code)}")


def inside(path: str | None, work: Callable[[], T]) -> T:
    """`work()` run in the network namespace at `path` (a /proc/PID/ns/net), or here when None."""
    if path is None:
        return work()

    def run() -> T:
        with open(path, "rb") as ns:
            _setns(ns.fileno())
        return work()

    return run_in_thread(run, "netns")


def connect(path: str | None, address: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to `address` as seen from the namespace at `path`."""
    return inside(path, lambda: socket.create_connection(address, timeout=timeout))


def route_out(path: str | None) -> str | None:
    """How the namespace at `path` reaches outside (a route exists), or None when nothing can leave it."""

    def look() -> str | None:
        for address, family in OUTSIDE:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                try:
                    sock.connect((address, 9))     # UDP: a route lookup, no packet
                except OSError as exc:
                    if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                        continue
                    return f"{address}: {exc.strerror}"
                return f"a route to {address} (from {sock.getsockname()[0]})"
        return None

    return inside(path, look)


def problem() -> str | None:
    """Why this process cannot join network namespaces, or None when it can (it tries its own)."""
    if not Path(OWN).exists():
        return "no /proc/self/ns/net: network namespaces need Linux"
    try:
        inside(OWN, lambda: None)
    except OSError as exc:
        return f"joining a network namespace needs CAP_SYS_ADMIN (root): {exc.strerror or exc}"
    return None


def of_process(pid: int) -> str:
    return f"/proc/{pid}/ns/net"


def same_as_ours(path: str) -> bool:
    """Whether the namespace at `path` is this process's own (the server's network was not cut)."""
    return os.stat(path).st_ino == os.stat(OWN).st_ino


def host_pid(inner_pid: int, marker: str, proc: Path = Path("/proc"), *, uid: int | None = None) -> int | None:
    """The pid on this machine of the process that is `inner_pid` in its own pid namespace (a container's)
    and carries `marker` (NAME=VALUE) in its environment (and, given `uid`, runs as it): the verification's
    server, not some other one. /proc is read as bytes: another user's process may have any name."""
    wanted = marker.encode()
    for pid in procs.pids(proc):
        ids = procs.ids_of(pid, proc)
        if ids is None or not ids.nspid or ids.nspid[-1] != inner_pid:
            continue
        if uid is not None and ids.uids != {uid}:
            continue
        try:
            if wanted in (proc / str(pid) / "environ").read_bytes().split(b"\0"):
                return pid
        except OSError:
            continue
    return None
