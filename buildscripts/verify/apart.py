"""Whether the code under test in host mode is apart from the verifier, decided from what the verifier knows
itself: the interpreter path and import path it hands on, the folders it imports from, and what the files there
allow the identity (their owner, group, mode and ACL, read here). Never from what the code under test says: an
interpreter asked for its import path can leave a folder out, and code from that folder has then already run
in the verifier, as root, beside the key.

A run vouches for nothing when
- a folder the verifier imports from (its site folders, a PYTHONPATH entry) is, holds or lies inside a folder of
  the environment under test: the prefix of its interpreter as given and as resolved, the `home` its pyvenv.cfg
  names, or an entry of the import path handed to it; what is there runs in the verifier too (a `.pth` file or
  `sitecustomize` at every start). The standard library and the project's own folder are the verifier's, read
  by the code under test and never written by it (below);
- the identity could write anything the verifier imports, runs from, or would import later: a folder on the way
  to one (it could move it aside) or any file or folder below one (walked, bounded); a sticky folder on the way
  (/tmp) is fine for entries the identity does not own.
"""

from __future__ import annotations

import itertools
import os
import stat
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import treewalk
from .access import SEARCH, WRITE, Who
from .treewalk import Budget, Cursor

MAX_ENTRIES = 1_000_000   # entries of the verifier's import folders looked at for write access
SHOWN = 3


def own_folders() -> list[Path]:
    """Every folder (or zip) the verifier imports from, resolved."""
    return list(dict.fromkeys(Path(p or ".").resolve() for p in sys.path))


def standard_folders() -> set[Path]:
    """The standard library: on every interpreter's path, and nothing the code under test wrote. Not the project's
    folder: the probe is handed as a copy (probe_source.py), so the verifier's own folder (installed, a
    site-packages of its dependencies) is on no path of the code under test and counts as the verifier's alone."""
    paths = sysconfig.get_paths()
    found = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib")}
    found |= {f / "lib-dynload" for f in set(found)} | {p for p in own_folders() if p.suffix == ".zip"}
    return found


def environment_folders(python: str, handed_path: Iterable[str]) -> list[Path]:
    """The folders of the environment under test, as the verifier finds them: its interpreter's prefix (_prefix)
    as given and as resolved, the base a pyvenv.cfg there names, and every entry of the import path handed to it."""
    given = Path(python).absolute()
    found = [_prefix(given), _prefix(given.resolve())]
    found += [_prefix(home / "python") for home in _venv_homes(_prefix(given))]
    found += [Path(p).resolve() for p in handed_path if p]
    return [f.resolve() for f in dict.fromkeys(found)]


def _prefix(executable: Path) -> Path:
    """Where an interpreter's environment lies: the folder above its bin/ (a venv, /usr), else its own folder."""
    return executable.parent.parent if executable.parent.name == "bin" else executable.parent


def _venv_homes(prefix: Path) -> list[Path]:
    """The `home = …` a pyvenv.cfg at `prefix` names (the base interpreter's bin folder), if it has one."""
    try:
        text = (prefix / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return []
    homes = []
    for line in text.splitlines()[:200]:
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home" and value.strip():
            homes.append(Path(value.strip()).absolute())
    return homes


def _related(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def why_shared(python: str, handed_path: Iterable[str], *, own: Sequence[Path] | None = None,
               standard: set[Path] | None = None) -> str | None:
    """Why the environment under test shares a folder with the verifier's imports (None: apart)."""
    standard = standard_folders() if standard is None else standard
    mine = [f for f in (own_folders() if own is None else own) if f not in standard]
    theirs = environment_folders(python, handed_path)
    pairs = [(m, t) for m in mine for t in theirs if _related(m, t)]
    if not pairs:
        return None
    shown = "; ".join(f"{m} ~ {t}" for m, t in pairs[:SHOWN])
    return (f"the verifier imports from folders of the environment under test ({shown}): what they hold runs in the "
            "verifier too; run the verifier from an environment of its own and hand the one under test no folder of "
            "it (--python, PYTHONPATH)")


def why_writable(who: Who, *, keep: Sequence[Path] = (), folders: Sequence[Path] | None = None,
                 budget: Budget | None = None) -> str | None:
    """Why the identity `who` could change what the verifier imports or runs (None: it cannot). `keep`: folders
    below those that are not the verifier's (the run's own folder, the identity's home)."""
    budget = budget or Budget(MAX_ENTRIES, MAX_ENTRIES)
    roots = [*(own_folders() if folders is None else folders), Path(sys.executable).absolute(),
             Path(sys.executable).resolve()]
    kept = {(st.st_dev, st.st_ino) for st in map(_lstat, keep) if st is not None}
    found: list[str] = []
    for root in dict.fromkeys(roots):
        found += _on_the_way(root, who)
        if len(found) < SHOWN:
            found += _below(root, who, kept, budget)
        if len(found) >= SHOWN:
            break
    if not found:
        return None
    shown = "; ".join(found[:SHOWN])
    return (f"the code under test's identity could change what the verifier imports or runs ({shown}): it could put "
            "code there that runs in the verifier; let only root write there")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def _on_the_way(target: Path, who: Who) -> list[str]:
    """The folders on the way to `target` through which the identity may change what that path leads to."""
    chain = [*reversed(target.parents), target]
    found = []
    for folder, child in itertools.pairwise(chain):
        st, below = _lstat(folder), _lstat(child)
        if st is None or below is None:
            continue
        sticky = bool(st.st_mode & stat.S_ISVTX)   # there only an entry's owner may move it
        if who.may(st, WRITE | SEARCH, _acl(folder)) and not (sticky and not who.owns(below)):
            found.append(f"{folder} (on the way to {target})")
    return found


def _acl(path: Path) -> bytes | None:
    try:
        return os.getxattr(path, "system.posix_acl_access", follow_symlinks=False)
    except OSError:
        return None


def _below(root: Path, who: Who, kept: set[tuple[int, int]], budget: Budget) -> list[str]:
    """`root` and what Python could import below it (folders named as identifiers) that the identity may write."""
    st = _lstat(root)
    if st is None:
        return []
    if _changeable(who, st, _acl(root)):
        return [str(root)]
    if not stat.S_ISDIR(st.st_mode):
        return []
    found: list[str] = []

    def visit(fd: int, name: bytes, entry: os.stat_result) -> bool:
        importable = os.fsdecode(name).isidentifier()   # a folder Python could import as a package
        if (entry.st_dev, entry.st_ino) in kept or (stat.S_ISDIR(entry.st_mode) and not importable):
            return False
        acl = None if stat.S_ISLNK(entry.st_mode) else _acl(Path(f"/proc/self/fd/{fd}") / os.fsdecode(name))
        if _changeable(who, entry, acl) and len(found) < SHOWN:
            found.append(str(root / os.fsdecode(b"/".join([*cursor.names, name]))))
        return importable

    try:
        cursor = Cursor.open(os.fsencode(root))
    except OSError:
        return []
    try:
        treewalk.walk(cursor, visit, budget)
    except treewalk.OverBudget as exc:
        found.append(f"{root} was not looked at whole: {exc}")
    except (OSError, treewalk.Moved) as exc:
        found.append(f"{root} could not be looked at whole: {exc}")
    finally:
        cursor.close()
    return found


def _changeable(who: Who, st: os.stat_result, acl: bytes | None) -> bool:
    """Whether the identity owns the entry or may write it (a link's own mode means nothing: its target is looked
    at where it lies)."""
    if who.owns(st):
        return True
    if stat.S_ISLNK(st.st_mode):
        return False
    return who.may(st, WRITE, acl)
