"""Disk room for the tests that hold gigabytes while they run (a registry's, a second engine's and LXC
containers' copies of real cells).

Each such test says how much it needs, and on which paths it writes, and starts only when that much is free on
each of their file systems beyond what the others running reserved there; otherwise it waits until one of them is
done. Where the disk has room for several, they run side by side on their workers (on a 2-core machine their
compression and copies then fill both cores); where it has not, they run one after another, as if they were one
unit of work. A test that finds too little room while nobody else holds any fails with what to free; one that
waits longer than its deadline fails with the reservations it waited for.

The reservations live in one ledger file per user for the whole machine, under an exclusive lock: pytest-xdist's
workers, and test sessions started beside each other, see each other's. A reservation counts in full for as long
as its test runs, although that test may already have written part of it (and so lowered the free space): the
rule errs towards waiting, never towards a full disk. A reservation is alive while its holder keeps its own lock
file locked (the kernel drops that lock with the process however it ends), so a killed test's entry, or one
whose release could not be written, no longer counts; a pid, which the kernel reuses, is not the test.
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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEDGER = Path(tempfile.gettempdir()) / f"sglang-images-disk-room-{os.getuid()}.json"
POLL_S = 5.0
DEADLINE_S = 2 * 3600   # far beyond the longest disk-heavy test (about 25 minutes on a busy 2-core machine)


def free_bytes(where: Path) -> int:
    return shutil.disk_usage(where).free


def engine_advice() -> str:
    """What the engine could free (the build's own disk check's hint)."""
    import docker

    from buildscripts.build import footprint

    try:
        with contextlib.closing(docker.from_env()) as client:
            return footprint.advice(client, ROOT / "runs", {}, lambda cell, inputs: "")
    except docker.errors.DockerException:
        return "free space: `docker image prune`, `docker buildx prune --force`"


def reclaim_cache() -> None:
    """Take back the BuildKit cache that no image holds, as a build does when it is short of room
    (footprint.make_room): right after `nox -s build` that cache is most of what the tests may need, and a newcomer
    runs the README's two commands back to back with nothing pruned between. The images stay, and so do the cache
    hits of the cells already built."""
    from buildscripts.build import footprint

    footprint.prune_cache(0, None)


def _holder(ledger: Path, token: str) -> Path:
    return ledger.with_name(f"{ledger.name}.{token}.lock")


def _alive(ledger: Path, token: str) -> bool:
    """Whether the holder of `token` still holds its lock file (a lock of this process's own counts too: flock
    locks belong to the open file, and this opens another); a gone holder's lock file is removed."""
    try:
        fd = os.open(_holder(ledger, token), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    _holder(ledger, token).unlink(missing_ok=True)
    return False


def _valid(entry: object) -> bool:
    return (isinstance(entry, dict) and all(isinstance(entry.get(k), int) for k in ("bytes", "device"))
            and isinstance(entry.get("holder"), str) and entry["holder"].isalnum())


@contextlib.contextmanager
def _ledger(path: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The live reservations, to read and change under the lock; written back on leaving (not when the body
    raises: nothing it changed is kept)."""
    with path.with_suffix(".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            found = {}   # a ledger cut short: its reservations are lost, not misread
        held = {key: r for key, r in (found.items() if isinstance(found, dict) else ())
                if _valid(r) and _alive(path, r["holder"])}
        yield held
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps(held))
        part.replace(path)


def _short(held: dict[str, dict[str, Any]], need: int, devices: dict[int, Path],
           free: Callable[[Path], int]) -> list[tuple[Path, int]]:
    """(path, free bytes) of each file system where `need` does not fit beside the others' reservations."""
    short = []
    for device, path in devices.items():
        others = sum(r["bytes"] for r in held.values() if r["device"] == device)
        available = free(path)
        if available - others < need:
            short.append((path, available))
    return short


@contextlib.contextmanager
def disk_room(need: int, what: str, where: Iterable[Path], advice: Callable[[], str] = engine_advice, *,
              ledger: Path = LEDGER, free: Callable[[Path], int] = free_bytes, poll: float = POLL_S,
              deadline: float = DEADLINE_S, reclaim: Callable[[], None] = reclaim_cache) -> Iterator[None]:
    """Hold `need` bytes on the file system of each path in `where` for the body (in full on each, when they are
    several); wait while the reservations of others leave too little; when there is too little and nobody else
    holds any, `reclaim()` once (the build cache no image holds) and look again; fail when that did not make
    enough room (with `advice()`, what to free), or after `deadline` seconds of waiting."""
    devices = {os.stat(path).st_dev: path for path in where}
    token, started, reclaimed = uuid.uuid4().hex, time.monotonic(), False
    holder = _holder(ledger, token).open("w")
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        while True:
            with _ledger(ledger) as held:
                short = _short(held, need, devices, free)
                if not short:
                    for device in devices:
                        held[f"{token}.{device}"] = {"holder": token, "pid": os.getpid(), "device": device,
                                                     "bytes": need, "what": what}
                    break
                waiting_for = [r["what"] for r in held.values()]
            if not waiting_for and not reclaimed:
                reclaim()
                reclaimed = True
                continue
            if not waiting_for:
                path, available = short[0]
                pytest.fail(f"{what} needs about {need / 1e9:.0f} GB free under {path}, there are "
                            f"{available / 1e9:.1f} GB; {advice()}")
            if time.monotonic() - started > deadline:
                pytest.fail(f"{what} waited {deadline:.0f} s for {need / 1e9:.0f} GB beside the reservations of: "
                            f"{'; '.join(waiting_for)} (ledger {ledger})")
            time.sleep(poll)
        yield
    finally:
        with contextlib.suppress(OSError), _ledger(ledger) as held:
            for key in [k for k, r in held.items() if r["holder"] == token]:
                del held[key]
        holder.close()   # the lock goes with it: whatever the ledger says, this reservation is over
        _holder(ledger, token).unlink(missing_ok=True)
