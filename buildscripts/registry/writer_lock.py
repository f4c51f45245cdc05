"""One writer per repository: the lock a promotion holds while it reads and writes a repository's tags.

Registries have no compare-and-swap on a tag, and the attestations of a digest live in one more tag
(`sha256-<hex>.att`, read, extended and written back): two promotions at once could each write a tag the
other just read, and an attestation would be lost. So a promotion takes an exclusive lock named after the
destination repository before it reads anything there, and holds it until its last write.

The lock is `flock(2)` on a file in a folder every promotion on this machine shares ($SGLANG_IMAGES_LOCK_DIR,
else /run/lock, else the temporary folder): the kernel releases it when its process ends, so a promotion
killed outright (SIGKILL) leaves no stale lock behind. Across machines it is the workflow's business: the
CI's promote job runs in one concurrency group (docs/ci.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .. import log, results
from ..errors import RegistryError

LOCK_DIR_ENV = "SGLANG_IMAGES_LOCK_DIR"
DEFAULT_WAIT_S = 3600.0
POLL_S = 0.2


def lock_dir(env: Mapping[str, str]) -> Path:
    if env.get(LOCK_DIR_ENV):
        return Path(env[LOCK_DIR_ENV])
    shared = Path("/run/lock")
    return shared if shared.is_dir() and os.access(shared, os.W_OK) else Path(tempfile.gettempdir())


def lock_path(repository: str, env: Mapping[str, str]) -> Path:
    """The lock file of one repository (named by a hash: a repository name may hold '/' and ':')."""
    name = hashlib.sha256(repository.encode()).hexdigest()[:16]
    return lock_dir(env) / f"sglang-images-promote-{name}.lock"


@contextmanager
def sole_writer(repository: str, env: Mapping[str, str], *, wait_s: float = DEFAULT_WAIT_S) -> Iterator[Path]:
    """Hold the repository's lock for the body; wait up to `wait_s` for another holder, then refuse."""
    path = lock_path(repository, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline, said = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(fd)
                if time.monotonic() >= deadline:
                    msg = f"another promotion of {repository} holds {path} ({holder}); waited {wait_s:.0f} s"
                    raise RegistryError(msg, hint="let it finish and promote again (nothing was written by this "
                                                  "one), or raise --lock-wait") from None
                if not said:
                    log.info(f"waiting for the promotion of {repository} that holds {path} ({holder})")
                    said = True
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {results.now()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)   # closing the file releases the lock (so does the end of the process)


def _holder(fd: int) -> str:
    text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    return text or "a process that has just taken it"
