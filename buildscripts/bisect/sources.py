"""Where a side of the bisection comes from: a lock file, a lockfiles folder, or a git ref of lockfiles/.

A ref names the cell's layer locks as they were committed (`git show REF:lockfiles/lanes/….txt`); a folder holds
them as lockfiles/ does; a file is one lock (a cell with one layer, or two locks made by hand for a question).
Every lock is read with the project's reader and refused when edited by hand, as a build would refuse it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import ConfigError, LockError
from ..lock import drift, lockfile
from ..lock.lockfile import Lockfile, Pin

LOCKS_FOLDER = "lockfiles"
GIT_HINT = "install git, or give the lock files as paths"


@dataclass(frozen=True)
class Side:
    """What one side (good or bad) installs, and where it was read."""

    ref: str                       # as given on the command line
    where: tuple[str, ...]         # each lock read, for the report
    locks: tuple[Lockfile, ...]    # in install order (lane, SGLang, toolkit)

    @property
    def pins(self) -> dict[str, Pin]:
        installed: dict[str, Pin] = {}
        for lock in self.locks:
            installed = {**installed, **lock.pins}   # drift.overlay's rule, with hashes kept
        return installed

    def header(self, key: str) -> str | None:
        """A header field of the lowest lock that has it (python, platform and index come from the lane)."""
        return next((lock.header[key] for lock in self.locks if key in lock.header), None)

    def versions(self) -> dict[str, str]:
        return drift.key_versions({name: pin.version for name, pin in self.pins.items()})


def read_side(ref: str, layers: Sequence[str], root: Path) -> Side:
    """The side REF names; `layers` are the cell's lock paths relative to lockfiles/ (a folder or a git ref)."""
    path = Path(ref)
    if path.is_file():
        return Side(ref, (ref,), (_checked(path.read_text(encoding="utf-8", errors="replace"), ref),))
    if path.is_dir():
        found = [(str(path / rel), path / rel) for rel in layers]
        missing = [shown for shown, p in found if not p.is_file()]
        if missing:
            msg = f"{ref} holds no {', '.join(missing)}"
            raise ConfigError(msg, hint="give a lockfiles folder that holds the cell's layer locks, or a lock file")
        read = tuple(_checked(p.read_text(encoding="utf-8", errors="replace"), shown) for shown, p in found)
        return Side(ref, tuple(shown for shown, _ in found), read)
    if ref.startswith("-") or not ref.strip():
        msg = f"{ref!r} is neither a lock file, a lockfiles folder nor a git ref"
        raise ConfigError(msg, hint="give a path to a lock, or a git ref such as main~3 or a commit")
    shown = tuple(f"{ref}:{LOCKS_FOLDER}/{rel}" for rel in layers)
    return Side(ref, shown, tuple(_checked(_git_show(spec, root), spec) for spec in shown))


def _git_show(spec: str, root: Path) -> str:
    """The file at `spec`, byte for byte (git's standard output to a file; its complaint on standard error)."""
    git = proc.which("git", hint=GIT_HINT)
    with tempfile.TemporaryDirectory(prefix="bisect-") as scratch:
        out = Path(scratch) / "lock.txt"
        done = proc.run_to_file([git, "-C", str(root), "show", spec], out, timeout=60)
        if done.ok:
            return out.read_text(encoding="utf-8", errors="replace")
    said = done.output.strip().splitlines()[-1] if done.output.strip() else "no output"
    msg = f"git cannot show {spec}: {said}"
    raise ConfigError(msg, hint="is the ref a commit of this checkout, and did the cell have its locks there? "
                                "(`git log -- lockfiles/` lists the commits that changed locks)")


def _checked(text: str, where: str) -> Lockfile:
    lock = lockfile.parse(text, where)
    if lock.edited_by_hand():
        msg = f"{where} was edited by hand: its body does not match the content-sha256 in its header"
        raise LockError(msg, hint="bisect locks written by `nox -s lock`; make a lock for a question with it too")
    return lock
