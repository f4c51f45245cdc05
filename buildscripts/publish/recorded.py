"""What `tag` and `promote` share around the results file they work from and write back to.

Both change the world first (tags in the engine, manifests in a registry) and record it in the file after.
So the file is checked writable before the engine is touched, a `--only` that selects nothing is an error
before anything happens, and a save that still fails names what was done and is not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import disk, results
from ..errors import ResultsError, SelectionError
from ..matrix import Matrix, selected
from ..results import RunResults
from ..trust.keys import PublicKey
from . import trusted


def positions(run: RunResults, only: Sequence[str]) -> list[int]:
    """Positions of the cells whose id matches an `only` glob (all when none is given)."""
    return [i for i, cell in enumerate(run.cells)
            if selected(cell.cell_id, only)]


def check_selection(runs: Mapping[Path, RunResults], only: Sequence[str]) -> None:
    """SelectionError when `only` globs are given and match no cell of any of the files."""
    if not only or any(positions(run, only) for run in runs.values()):
        return
    wanted = " ".join(f"--only {p!r}" for p in only)
    sample = ", ".join(c.cell_id for run in runs.values() for c in run.cells[:4]) or "(none: no cell at all)"
    msg = f"{wanted} matches no cell of " + ", ".join(map(str, runs))
    raise SelectionError(msg, hint=f"cell ids there: {sample}")


def load_checked(paths: Sequence[Path], matrix: Matrix, keys: Sequence[PublicKey], *, only: Sequence[str],
                 command: str) -> dict[Path, RunResults]:
    """The results files `command` acts from and writes back to, every one checked before its first tag or
    push: writable, no record in the selection that the gate refuses (a stale or foreign one included), and the
    selection not empty."""
    runs = {path: results.load(path) for path in paths}
    earning: dict[str, dict[str, Path]] = {}   # cell id -> tested image -> the file whose record earned tags
    for path, run in runs.items():
        check_writable(path, command)
        sifted = trusted.sift(run, matrix, keys, only)
        trusted.refuse(sifted, path)
        for c in sifted:
            if isinstance(c, trusted.Trusted) and c.why_not is None and not c.record.image.subject:
                earning.setdefault(c.cell_id, {}).setdefault(c.image_id, path)
    check_selection(runs, only)
    check_one_image_per_cell(earning)
    return runs


def check_one_image_per_cell(earning: Mapping[str, Mapping[str, Path]]) -> None:
    """ResultsError when one cell earned good tags for different images in the files given: which one the
    moving tags should name is not for file order to decide (promotion by digest weighs its records itself)."""
    for cell_id, images in earning.items():
        if len(images) > 1:
            found = "; ".join(f"{image[:19]}… in {path}" for image, path in images.items())
            msg = f"{cell_id} earned good tags for {len(images)} different images: {found}"
            raise ResultsError(msg, hint="pass only the results file whose image should carry the tags "
                                         "(--results FILE), or select other cells with --only")


def check_writable(path: Path, command: str) -> None:
    """The results file can be written back: said before the first tag or push."""
    disk.check_writable(path, f"--results {path}", hint=f"`{command}` records what it did in the results file: "
                                                         "make its folder writable, or copy the file where it is")


def save(run: RunResults, path: Path, done: str) -> None:
    """Save after the work; a failure says what was `done` and is not recorded (re-running does it again)."""
    try:
        results.save(run, path)
    except OSError as exc:
        msg = f"{done}, but it could not be recorded in {path}: {exc.strerror}"
        raise ResultsError(msg, hint="make the file writable and run the same command again: it does the same "
                                     "again and records it") from None
