"""Cells: matrix.yaml expanded into every combination, and selected with globs.

A cell is one point of base × torch lane × SGLang version × toolkit layer. Its `id` names it
everywhere (image tag, log folder, report row, --only); nothing else builds cell names.
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SelectionError
from ..results import ExpectedFailure, matrix_digest
from ..results.judge import RULES
from . import definition as definitions
from .schema import Base, Expectation, MatrixFile, Profile, SGLang, Toolkit, TorchLane


@dataclass(frozen=True, kw_only=True)
class Cell:
    base_name: str
    base: Base
    lane: TorchLane
    sglang: SGLang
    toolkit_name: str
    toolkit: Toolkit
    archs: tuple[str, ...]
    also_audit: tuple[str, ...] = ()  # audited and compiled for too, never failing; not an input of the image
    excluded: str | None = None  # reason, when a rule or SGLang's torch pin rules the cell out
    opt_in: str | None = None    # reason, when its platform is built only when a selection names the cell
    expected: Expectation | None = field(default=None, compare=False)
    # everything matrix.yaml says about this cell (matrix/definition.py): what a record of it is valid for
    definition: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def definition_digest(self) -> str:
        return definitions.digest(self.definition)

    @property
    def id(self) -> str:
        return f"sglang{self.sglang.version}-{self.lane.id}-{self.toolkit_name}-{self.base_name}"

    @property
    def platform(self) -> str:
        """The OCI platform of the cell's image (linux/amd64, linux/arm64): its base's CPU. The id shows it
        through the base's name (an arm64 base is named so, e.g. bookworm-arm64)."""
        return self.base.cpu.oci

    @property
    def sglang_layer_id(self) -> str:
        """Cells differing only in toolkit share this layer (and its lockfile)."""
        return f"sglang{self.sglang.version}-{self.lane.id}-{self.base_name}"

    @property
    def lane_layer_id(self) -> str:
        return f"{self.lane.id}-{self.base_name}"

    def axes(self) -> dict[str, str]:
        """The cell's coordinates, as shown in reports and usable in tag templates."""
        return {
            "cell": self.id,
            "base": self.base_name,
            "python": self.base.python,
            "torch": self.lane.torch,
            "cuda": self.lane.cuda,
            "lane": self.lane.id,
            "sglang": self.sglang.version,
            "toolkit": self.toolkit_name,
            "archs": " ".join(self.archs),
        }

    def expected_failure(self) -> ExpectedFailure | None:
        """The declared expected failure, as the results record keeps it."""
        exp = self.expected
        if exp is None:
            return None
        return ExpectedFailure(stages=list(exp.stages), failure_class=exp.failure_class, reason=exp.reason)


@dataclass(frozen=True)
class Matrix:
    spec: MatrixFile
    path: Path
    cells: tuple[Cell, ...]

    @property
    def digest(self) -> str:
        """The whole file's digest (results.matrix_digest): provenance in every record, no longer what it counts
        for (a record counts while its own cell's definition holds: gate.py)."""
        return matrix_digest(self.spec)

    def cell(self, cell_id: str) -> Cell | None:
        """The cell whose id is `cell_id` (excluded ones too), None when there is none."""
        return next((c for c in self.cells if c.id == cell_id), None)

    def buildable(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.excluded is None)

    def profile(self, name: str) -> Profile:
        """The server profile `name` (--profile of `build` and `verify`), else a ConfigError naming the known."""
        found = self.spec.profiles.get(name)
        if found is None:
            msg = f"no server profile {name!r} in {self.path} (known: {', '.join(self.spec.profiles)})"
            raise ConfigError(msg, hint="pass --profile with one of those names")
        return found


# ---------------------------------------------------------------- expansion


def expand(spec: MatrixFile) -> Iterable[Cell]:
    """Every combination, in file order; ruled-out cells carry their reason instead of vanishing."""
    for (base_name, base), lane, sgl, (tk_name, toolkit) in itertools.product(
        spec.bases.items(), spec.torch_lanes, spec.sglang, spec.toolkits.items()
    ):
        targets = spec.targets(base.cpu.oci)   # each platform its own GPU targets
        cell = Cell(
            base_name=base_name, base=base, lane=lane, sglang=sgl,
            toolkit_name=tk_name, toolkit=toolkit, archs=targets.archs, also_audit=targets.also_audit,
            opt_in=targets.opt_in,
        )
        reason = _excluded_because(cell, spec)
        expected = next((e for e in spec.expect if fnmatch.fnmatchcase(cell.id, e.match)), None)
        judged = Cell(**{**cell.__dict__, "excluded": reason, "expected": expected})
        yield Cell(**{**judged.__dict__, "definition": definition(judged, spec)})


def _excluded_because(cell: Cell, spec: MatrixFile) -> str | None:
    if cell.sglang.torch != cell.lane.torch:
        return (f"sglang {cell.sglang.version} pins torch {cell.sglang.torch}; "
                f"lane {cell.lane.id} has torch {cell.lane.torch}")
    for rule in spec.exclude:
        if fnmatch.fnmatchcase(cell.id, rule.match):
            return rule.reason
    if cell.toolkit.pip and cell.lane.cuda not in cell.toolkit.pip:
        return f"toolkit {cell.toolkit_name!r} has no recipe for {cell.lane.cuda}"
    return None


def definition(cell: Cell, spec: MatrixFile) -> dict[str, Any]:
    """The cell's definition as canonical JSON-ready data (defaults left out where a model has them)."""
    def dumped(model: Any) -> Any:
        return model.model_dump(mode="json", by_alias=True, exclude_defaults=True)

    own = {flavour: pins for flavour, pins in cell.toolkit.pip.items() if flavour == cell.lane.cuda}
    profiles = dict.fromkeys(("default", *cell.toolkit.warm_profiles))
    flavour = spec.cuda.get(cell.lane.cuda)
    return {
        "base": {"name": cell.base_name, **dumped(cell.base)},
        "platform": cell.platform,
        "lane": {**dumped(cell.lane), "cuda_version": flavour.version if flavour else None},
        "sglang": dumped(cell.sglang),
        "toolkit": {"name": cell.toolkit_name,   # its description is prose: editing it changes no image
                    **dumped(cell.toolkit.model_copy(update={"pip": own, "description": ""}))},
        "targets": list(cell.archs),
        "also_audit": list(cell.also_audit),
        "profiles": {name: dumped(spec.profiles[name]) for name in profiles if name in spec.profiles},
        "expected": definitions.expectation(cell.expected_failure()),
        "excluded": cell.excluded,
        "opt_in": cell.opt_in,
        "tags": dumped(spec.tags),
        "rules": RULES,
    }


# ---------------------------------------------------------------- selection


def selected(cell_id: str, only: Sequence[str], skip: Sequence[str] = ()) -> bool:
    """The one `--only`/`--skip` rule: an id any `only` glob matches (every id when none) and no `skip` glob."""
    return ((not only or any(fnmatch.fnmatchcase(cell_id, p) for p in only))
            and not any(fnmatch.fnmatchcase(cell_id, p) for p in skip))


def buildable(cells: Sequence[Cell], cell_id: str, *, where: str, doing: str, hint: str) -> Cell:
    """The cell `cell_id` of `cells`, when it builds; else a SelectionError saying it is no cell of `where`, or is
    excluded there (and why), so that `doing` cannot be done."""
    cell = next((c for c in cells if c.id == cell_id), None)
    if cell is None or cell.excluded:
        why = "is no cell of" if cell is None else f"is excluded ({cell.excluded}) in"
        msg = f"{cell_id} {why} {where}: {doing}"
        raise SelectionError(msg, hint=hint)
    return cell


def select(
    cells: Sequence[Cell], only: Sequence[str] = (), skip: Sequence[str] = (), *, include_excluded: bool = False,
    include_opt_in: bool = False,
) -> list[Cell]:
    """Cells whose id matches any `only` glob (all when empty) and no `skip` glob. A cell of an opt-in platform
    is among them only when an `only` glob matches it (or `include_opt_in`: locking, listing everything).

    A selection that matches nothing is an error, naming the patterns and a few ids that exist.
    """
    pool = [c for c in cells if (include_excluded or c.excluded is None)
            and (include_opt_in or c.opt_in is None or any(fnmatch.fnmatchcase(c.id, p) for p in only))]
    chosen = [c for c in pool if selected(c.id, only, skip)]
    if not chosen:
        wanted = " ".join(f"--only {p!r}" for p in only) + " ".join(f" --skip {p!r}" for p in skip)
        sample = ", ".join(c.id for c in pool[:4]) or "(none: every cell is excluded)"
        ruled_out = [c.id for c in cells if c.excluded and any(fnmatch.fnmatchcase(c.id, p) for p in only)]
        extra = f" ({len(ruled_out)} excluded cell(s) match: see `nox -s matrix -- --all`)" if ruled_out else ""
        msg = f"the selection {wanted.strip() or '(all)'} matches no buildable cell{extra}"
        raise SelectionError(msg, hint=f"cell ids look like: {sample}")
    return chosen

