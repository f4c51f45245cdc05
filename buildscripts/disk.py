"""Files on disk: whole-or-nothing writes, writability checked before the work, folder sets swapped in whole,
and sizes in words.

Every write that replaces a file goes through `write_text`: a uniquely named temporary file beside the
target, synced, then renamed over it, so that a process killed at any moment leaves the old file or the new
one (never half of one, never a fixed `.tmp` name that two writers would share). A target that is a symbolic
link is written through: the link stays and its target is replaced (a README kept elsewhere and linked into a
checkout must stay linked). A set of files that belong together (the reports) is written into a fresh folder
and swapped in whole by `replace_folder`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .errors import ConfigError

# renameat2(2) flag: swap two paths atomically (Linux 3.15+; ext4, xfs, btrfs, tmpfs, overlayfs)
RENAME_EXCHANGE = 2
AT_FDCWD = -100
NAME_MAX = 255  # bytes in one file name on every Linux file system


def size_text(size: float) -> str:
    """Bytes in words that never round a real size to nothing: 2.31 GB, 412 MB, 37 kB, 512 bytes."""
    if size >= 1e8:
        return f"{size / 1e9:.2f} GB"
    if size >= 1e6:
        return f"{size / 1e6:.0f} MB"
    if size >= 1e3:
        return f"{size / 1e3:.0f} kB"
    return f"{int(size)} bytes"


def target_of(path: Path) -> Path:
    """Where a write to `path` lands: `path`, or the file a symbolic link at `path` points to."""
    return path.resolve() if path.is_symlink() else path


def write_text(path: Path, text: str) -> Path:
    """Replace `path` (through a link) with `text`, whole or not at all; return the file written.

    The existing file's permissions are kept. OSError on failure, with nothing left behind.
    """
    target = target_of(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename: a machine that dies keeps old or new
        with contextlib.suppress(FileNotFoundError):
            shutil.copymode(target, tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def writable_problem(path: Path, *, folder: bool = False) -> str | None:
    """Why a file (`folder`: a folder set, `replace_folder`) cannot be written at `path`, or None.

    Tried for real in the folder it goes into, not guessed from permission bits (root ignores those, a
    read-only mount does not). Makes missing parent folders.
    """
    try:
        target = target_of(path)
        if folder and target.exists() and not target.is_dir():
            return f"{path} is a file, not a folder"
        if not folder and target.is_dir():
            return f"{path} is a folder"
        above = next(p for p in target.parents if p.exists() or p == p.parent)
        if not above.is_dir():
            return f"{above} is a file, not a folder (so nothing can be written below it)"
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".write-check-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"cannot write into {exc.filename or path.parent}: {exc.strerror}"
    if len(os.fsencode(target.name)) + 24 > NAME_MAX:  # the temporary name beside it must fit too
        return f"the name {target.name[:40]}… is too long for the file system"
    return None


def check_writable(path: Path, what: str, hint: str, *, folder: bool = False) -> None:
    """ConfigError naming `what` (e.g. `--out`) when `path` cannot be written: said before any work."""
    problem = writable_problem(path, folder=folder)
    if problem:
        msg = f"{what}: {problem}"
        raise ConfigError(msg, hint=hint)


_MAGIC = re.compile(r"[*?[]")


def glob_files(patterns: Sequence[str]) -> list[Path]:
    """The files that the glob `patterns` match, sorted; `**` is any depth of folders.

    Unlike `glob.glob(recursive=True)`, `**` does not descend into symbolic links to folders (pathlib's rule):
    two links to `.` made it walk forever. Hidden names match only a pattern part that starts with a dot, as
    in glob.
    """
    found: set[Path] = set()
    for pattern in patterns:
        with contextlib.suppress(OSError):  # a name the file system cannot hold (too long) matches nothing
            found.update(_glob_one(pattern))
    return sorted(found)


def _glob_one(pattern: str) -> Iterator[Path]:
    parts = Path(pattern).parts
    fixed = next((i for i, part in enumerate(parts) if _MAGIC.search(part)), len(parts))
    root, rest = Path(*parts[:fixed]) if fixed else Path(), parts[fixed:]
    if not rest:
        yield from [root] if root.is_file() else []
        return
    dotted = any(part.startswith(".") for part in rest)
    for match in root.glob(str(Path(*rest))):
        below = match.relative_to(root).parts if root != Path() else match.parts
        if match.is_file() and (dotted or not any(p.startswith(".") for p in below)):
            yield match


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on `folder` itself (no lock file left behind): swaps into it take turns."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap `a` and `b` in one step; False where the C library or file system cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


STALE_S = 3600  # a set folder this old is no writer's any more, whatever its process id says


def _sweep(out: Path) -> None:
    """Remove the half-written sets that killed writers left beside `out`: those of a process that is gone (the
    id is in the name), and any an hour old (an id reused, or a writer on another machine sharing the folder)."""
    for kind in ("new", "old"):  # the prefixes of `new_folder` and of the moved-aside set
        for left in out.parent.glob(f".{glob.escape(out.name)}.{kind}-*"):
            with contextlib.suppress(OSError):
                if not _alive(left.name.split(f".{kind}-", 1)[1]) or time.time() - left.lstat().st_mtime > STALE_S:
                    shutil.rmtree(left)


def _alive(tail: str) -> bool:
    """Whether the writer whose id begins `tail` (`PID-random`) still runs here."""
    pid = tail.split("-", 1)[0]
    if not pid.isdigit():
        return True  # not ours to judge: age decides
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def new_folder(beside: Path) -> Path:
    """A fresh, uniquely named hidden folder next to `beside`, to fill and then `replace_folder` with."""
    beside.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(dir=beside.parent, prefix=f".{beside.name}.new-{os.getpid()}-"))
    umask = os.umask(0)
    os.umask(umask)
    fresh.chmod(0o777 & ~umask)  # mkdtemp's 0700 would become the swapped-in folder's: readable as mkdir makes it
    return fresh


def replace_folder(new: Path, out: Path) -> Path:
    """Put the folder `new` at `out` in one step (through a link at `out`); return where it went.

    Where renameat2 can exchange them, a reader (or a process killed at any moment) sees the old set or the
    new one, never a mix. Elsewhere the old folder is moved aside first: killed in between, `out` is missing
    and the old set waits in a hidden folder beside it. Writers into one `out` take turns (a lock on the
    parent folder), so the last one's set stands whole; each removes the set it replaced.
    """
    out = target_of(out)
    with _locked(out.parent):
        _sweep(out)
        if not out.exists():
            os.rename(new, out)
            return out
        if not _exchange(new, out):
            aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-{os.getpid()}-"))
            os.rename(out, aside / "set")
            os.rename(new, out)
            new = aside
    shutil.rmtree(new, ignore_errors=True)  # the old set, now at (or inside) `new`
    return out
