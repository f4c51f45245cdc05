"""Disk room for the tests that hold gigabytes while they run (a registry's and a second engine's copy of a real
cell; the OCI archive and the LXC root file system of one).

Each such test says how much it needs and starts only when that much is free beyond what the others running
already reserved; otherwise it waits until one of them is done. Where the disk has room for several, they run side
by side on their workers (on a 2-core machine their single-threaded compression and copies then overlap); where it
has not, they run one after another, as if they were one unit of work. A test that would not find the room even
alone fails at once with what to free.

The reservations live in one ledger file for the whole machine, under an exclusive lock: pytest-xdist's workers,
and test sessions started beside each other, see each other's. A reservation counts in full for as long as its
test runs, although that test may already have written part of it (and so lowered the free space): the rule errs
towards waiting, never towards a full disk. A reservation whose process is gone no longer counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEDGER = Path(tempfile.gettempdir()) / "sglang-images-disk-room.json"
POLL_S = 5.0


def free_bytes(where: Path) -> int:
    return shutil.disk_usage(where).free


def engine_advice() -> str:
    """What the engine could free (the build's own disk check's hint)."""
    import docker

    from buildscripts.build import footprint

    with contextlib.closing(docker.from_env()) as client:
        return footprint.advice(client, ROOT / "runs", {}, lambda cell, inputs: "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        return True
    return True


@contextlib.contextmanager
def _ledger(path: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The reservations of live processes, to read and change under the lock; written back on leaving."""
    with path.with_suffix(".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            found = {}   # a ledger cut short by a killed writer: its reservations are lost, not misread
        held = {token: r for token, r in found.items()
                if isinstance(r, dict) and isinstance(r.get("pid"), int) and _alive(r["pid"])}
        yield held
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps(held))
        part.replace(path)


@contextlib.contextmanager
def disk_room(need: int, what: str, where: Path, advice: Callable[[], str] = engine_advice, *, ledger: Path = LEDGER,
              free: Callable[[Path], int] = free_bytes, poll: float = POLL_S) -> Iterator[None]:
    """Hold `need` bytes of the file system of `where` for the body; wait while the reservations of others leave
    too little; fail (with `advice()`, what to free) when there is too little with no other reservation."""
    token, device = uuid.uuid4().hex, os.stat(where).st_dev
    while True:
        with _ledger(ledger) as held:
            others = sum(int(r["bytes"]) for r in held.values() if r.get("device") == device)
            available = free(where)
            if available - others >= need:
                held[token] = {"pid": os.getpid(), "device": device, "bytes": need, "what": what}
                break
            if not others:
                pytest.fail(f"{what} needs about {need / 1e9:.0f} GB free under {where}, there are "
                            f"{available / 1e9:.1f} GB; {advice()}")
        time.sleep(poll)
    try:
        yield
    finally:
        with _ledger(ledger) as held:
            held.pop(token, None)
