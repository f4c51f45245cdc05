"""The one place that knows where things live: the project root, matrix.yaml, the locks and the runs.

Made once at the top (by `cli` and each command's argument parsing) and passed down, so that `lock`,
`build`, `verify`, `promote` and `report` can never look in different places. The project root is
where images/ (the Dockerfile and layer recipes) and lockfiles/ live; a matrix file may live
elsewhere, its locks still go to the project's lockfiles/ (and `lock --check` then says whether
they were made from that file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The wheel's copy of matrix.yaml (a link to it in the checkout): the cells, targets and server profiles of the
# images the release built, for commands run where there is no matrix file (`verify --here` in place).
PACKAGED_MATRIX = Path(__file__).resolve().parent / "data" / "matrix.yaml"


def default_root() -> Path:
    """The checkout the package sits in (the folder holding it and matrix.yaml). Installed from the wheel, the
    package sits among other distributions, where nothing of the project is: the folder the command runs in is
    then the one it reads (keys/*.pub, results) and writes (runs/, exports/), never the installation."""
    return PROJECT_ROOT if (PROJECT_ROOT / "matrix.yaml").is_file() else Path.cwd()


def default_matrix(root: Path) -> Path:
    """ROOT/matrix.yaml; installed from the wheel, where the folder the command runs in has none, the matrix the
    wheel carries. Never in a checkout: there a missing matrix file stays an error, not another file silently read."""
    own = root / "matrix.yaml"
    if own.is_file() or (PROJECT_ROOT / "matrix.yaml").is_file() or not PACKAGED_MATRIX.is_file():
        return own
    return PACKAGED_MATRIX


# A name that becomes one folder under runs/ (a run id, a cell id): ASCII letters, digits and ._+@- only, not
# starting with a dot or dash, at most 200 characters (a cell id from matrix.yaml has at most ~150), so that
# `../..`, `a/b`, control characters or an option-like `-rf` cannot name anything outside the folder.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@-]{0,199}")


def checked_name(value: str, what: str) -> str:
    """`value` when it is safe as one path component under runs/, else a ConfigError naming `what`."""
    if not SAFE_NAME.fullmatch(value):
        msg = f"{what} {value!r} cannot be a folder name"
        raise ConfigError(msg, hint="use up to 200 ASCII letters, digits and . _ + @ -, starting with a letter or "
                                    "digit (no /, .., spaces or control characters)")
    return value


@dataclass(frozen=True, kw_only=True)
class Workspace:
    root: Path       # the build context: images/, lockfiles/ and (by default) matrix.yaml
    matrix: Path     # matrix.yaml
    locks: Path      # lockfiles/
    runs: Path       # one folder per run: logs, results.json, reports

    @classmethod
    def at(cls, root: Path | None = None, *, matrix: Path | None = None, runs: Path | None = None,
           locks: Path | None = None) -> Workspace:
        root = (root or default_root()).resolve()
        return cls(root=root, matrix=matrix or default_matrix(root), locks=locks or root / "lockfiles",
                   runs=runs or root / "runs")

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def cache(self) -> Path:
        """Generated build inputs (per-cell metadata files) inside the build context."""
        return self.root / ".cache"

    def run_dir(self, run_id: str) -> Path:
        """The folder of one run; `run_id` is checked here, so every command that names a run is safe."""
        return self.runs / checked_name(run_id, "run id")

    def cell_dir(self, run_id: str, cell_id: str) -> Path:
        """A cell's logs within a run (the cell id is checked too: --cell-id names it by hand)."""
        return self.run_dir(run_id) / checked_name(cell_id, "cell id")

    def shown(self, path: Path) -> str:
        """`path` relative to the project root when it is inside, for messages and records."""
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)
