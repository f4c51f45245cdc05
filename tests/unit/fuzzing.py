"""What the fuzz tests share: a temporary workspace, hostile text, and the one outcome check.

Every command runs in-process, parsed and run as the CLI runs it (tests/commands.py), against a copy of the
project (matrix.yaml, lockfiles/, a README with the table markers) in a temporary folder, with that folder as
the working directory, so that whatever a generated argument names lands there. An outcome is acceptable when
the command returns, raises one of the project's errors (whose message must print without an exception), or
exits through argparse with a message; anything else -- a traceback -- fails the test.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from buildscripts import engine, log
from buildscripts.cli import Command
from buildscripts.errors import FatalError
from buildscripts.report import markdown
from buildscripts.trust.keys import KEY_DIR_ENV
from buildscripts.workspace import Workspace
from tests.commands import call

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "matrix.yaml").read_text()

# No example database (it would be written into the project), a 5 s limit per example, no health check for
# the slow-ish examples (each one loads and validates a whole matrix).
# Under CI the examples are derandomized: a red run can be replayed exactly; elsewhere each run explores anew.
FUZZ = settings(deadline=5000, database=None, print_blob=True, derandomize=os.environ.get("CI") == "true",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# The share of each property's examples that a run draws: all of them unless told (`nox -s tests`, CI), a quarter
# under `nox -s fast`, which sets SGLANG_IMAGES_FUZZ_SHARE=0.25 so that the tiers to run while you work stay
# under a minute with coverage (coverage doubles the cost of hypothesis' draws). Every property still runs
# there, on new examples each time.
SHARE = float(os.environ.get("SGLANG_IMAGES_FUZZ_SHARE", "1"))


def examples(full: int, least: int = 10) -> int:
    """How many examples a property of `full` examples draws in this run (at least `least`); also the rounds
    of a test that repeats an attempt at random moments (the report kills)."""
    return max(least, round(full * SHARE))


# Text that once crashed or fooled something: rich markup, format fields, path tricks, Unicode digits.
HOSTILE = [
    "[/]", "[bold]", "[red]x[/red]", "[link=file:///etc/passwd]x[/link]", "[[/]]", "\\[b]", ":x:", "%s%n", "{cell}",
    "${HOME}", "../..", "/", "..", ".", "", " ", "-", "--", "-h", "１.２.３", "sm_٩٠a", "sm_90a\n", "sm_999", "\x00",
    "\x1b[31m", "\u202e", "\ud800", "9" * 5000, "-1", "0", "nan", "inf", "1e309", "☃", "a" * 300,
]
TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12),
                 st.text(alphabet=st.characters(codec="ascii"), max_size=12))


class ReachedOutside(Exception):
    """Raised instead of contacting Docker or starting a process: the arguments were accepted (also fine)."""


def make_workspace(root: Path) -> Workspace:
    shutil.copy(ROOT / "matrix.yaml", root / "matrix.yaml")
    shutil.copytree(ROOT / "lockfiles", root / "lockfiles")
    (root / "README.md").write_text(f"# x\n{markdown.START}\n{markdown.END}\n")
    return Workspace.at(root)


@contextlib.contextmanager
def confined(root: Path) -> Iterator[None]:
    """cwd is the workspace, the engine cannot be reached, and the project tree must be left untouched."""
    before = tree(ROOT)

    def stop(*args: object, **kwargs: object) -> None:
        raise ReachedOutside
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setattr(engine, "connect", stop)
        patch.setattr(subprocess, "Popen", stop)
        yield
    assert tree(ROOT) == before, "a fuzzed command wrote into the project tree"


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file of the project (not caches or environments) with its size and modification time."""
    # caches and environments, and the folders of runs made beside the tests (a build in the same checkout)
    skip = {".git", ".nox", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
            "runs", "exports", ".cache", ".import_linter_cache"}
    found: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            if name.startswith(".coverage"):  # coverage data that a parallel test worker saves as it ends
                continue
            info = os.lstat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (info.st_size, info.st_mtime_ns)
    return found


def disk_fills_at(patch: pytest.MonkeyPatch, nth: int) -> None:
    """From now on the `nth` file opened for writing raises ENOSPC: a disk that fills half-way through a set
    of files (the reports: one `Path.open` per file, whichever way they are written)."""
    real, opened = Path.open, []

    def filling(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode:
            opened.append(self)
            if len(opened) == nth:
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, mode, *args, **kwargs)
    patch.setattr(Path, "open", filling)


def run(command: Command, argv: Sequence[str], ws: Workspace) -> str:
    """Run one command; return how it ended ("ok", "error", "usage", "outside"), failing on anything else."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            # the verifier key, where a command seals a record, goes into the workspace too
            call(command, argv, ws, {KEY_DIR_ENV: str(ws.root / ".keys")})
        except FatalError as exc:
            log.error(str(exc))  # the printer must take any message (markup in user text crashed it)
            assert exc.exit_code != 0 and exc.message
            return "error"
        except SystemExit as exc:  # argparse: usage errors exit 2 with a message, --help exits 0
            assert exc.code == 0 or (exc.code == 2 and "error:" in err.getvalue()), (exc.code, err.getvalue())
            return "usage"
        except ReachedOutside:
            return "outside"
    return "ok"
