"""The results files a report's default search finds, and what it met and did not read, with why.

The search reads regular files only (`disk.glob_files`): a `runs/*/results.json` that is a link to a device, a
fifo or a folder would hang a reader or mean nothing. Such a match is not read, and the report says which
and why, rather than leaving it out without a word.
"""

from __future__ import annotations

import contextlib
import glob
import stat
from collections.abc import Sequence
from pathlib import Path

from .. import disk

KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def what_it_is(path: Path) -> str | None:
    """None for a regular file (or a link to one), else what it is, said for a warning."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"a link that leads nowhere readable ({exc.strerror})" if path.is_symlink() else exc.strerror
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
    return f"a link to {kind}" if path.is_symlink() else kind


def results(patterns: Sequence[str]) -> tuple[list[Path], list[str]]:
    """The regular files `patterns` match (sorted), and one line per match skipped: its path and what it is."""
    paths = disk.glob_files(patterns)
    skipped: dict[str, str] = {}
    for pattern in patterns:
        with contextlib.suppress(OSError):
            for name in glob.glob(pattern):  # the same matches, whatever they are
                kind = what_it_is(Path(name))
                if kind is not None:
                    skipped[name] = kind
    return paths, [f"skipped {name}: it is {kind}, not a results file" for name, kind in sorted(skipped.items())]
