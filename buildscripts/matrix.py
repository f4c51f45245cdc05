"""Load matrix.yaml, expand it into cells, select cells with globs.

A cell is one point of base × torch lane × SGLang version × toolkit layer. Its `id` names it
everywhere (image tag, log folder, report row, --only); nothing else builds cell names.
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .config import Base, Expectation, MatrixFile, SGLang, Toolkit, TorchLane
from .errors import ConfigError, SelectionError


@dataclass(frozen=True, kw_only=True)
class Cell:
    base_name: str
    base: Base
    lane: TorchLane
    sglang: SGLang
    toolkit_name: str
    toolkit: Toolkit
    archs: tuple[str, ...]
    excluded: str | None = None  # reason, when a rule or SGLang's torch pin rules the cell out
    expected: Expectation | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        return f"sglang{self.sglang.version}-{self.lane.id}-{self.toolkit_name}-{self.base_name}"

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


@dataclass(frozen=True)
class Matrix:
    spec: MatrixFile
    path: Path
    cells: tuple[Cell, ...]

    def buildable(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.excluded is None)


# ---------------------------------------------------------------- loading


def load(path: Path, env: dict[str, str] | None = None) -> Matrix:
    """Read and validate matrix.yaml. `env` is accepted for symmetry with other loaders (tests pass {})."""
    del env  # nothing in the schema reads the environment yet
    try:
        text = path.read_text()
    except OSError as exc:
        msg = f"cannot read the matrix file {path}: {exc.strerror}"
        raise ConfigError(msg, hint="pass --matrix PATH or run from the project root") from None
    return parse(text, path)


def parse(text: str, path: Path) -> Matrix:
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        msg = f"{where}: malformed YAML: {exc.problem}"
        raise ConfigError(msg, hint="fix the YAML syntax at that line") from None
    if not isinstance(data, dict):
        msg = f"{path}: expected a mapping at the top level, got {type(data).__name__}"
        raise ConfigError(msg)
    try:
        spec = MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path, root), hint="see the comments in matrix.yaml") from None
    return Matrix(spec=spec, path=path, cells=tuple(expand(spec)))


def _explain(exc: ValidationError, path: Path, root: yaml.Node | None) -> str:
    lines = [f"{path}: {exc.error_count()} problem(s)"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        yaml_path = ".".join(str(p) for p in loc) or "(top level)"
        line = _line_of(root, loc)
        where = f"line {line}: " if line else ""
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            known = _known_keys(MatrixFile, loc[:-1])
            close = difflib.get_close_matches(key, known, n=1)
            suggestion = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
            lines.append(f"  {where}{yaml_path}: unknown key {key!r}{suggestion}")
        elif err["type"] == "missing":
            lines.append(f"  {where}{yaml_path}: required key is missing")
        else:
            got = err.get("input")
            shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"  {where}{yaml_path}: {message}{shown}")
    return "\n".join(lines)


def _known_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys allowed at `loc`, walking the pydantic models (dict keys and list indexes skipped)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        info = current.model_fields.get(str(part)) or next(
            (f for f in current.model_fields.values() if f.alias == part), None
        )
        if info is None:
            return []
        current = _model_in(info.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _model_in(annotation: Any) -> Any:
    """The BaseModel inside `X | None`, `dict[str, X]` or `tuple[X, ...]`, else the annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """1-based line of the deepest YAML node along `loc`, so that an error points at its line."""
    best = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if pair is None:
                break
            best, node = pair[0].start_mark.line + 1, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            best = node.start_mark.line + 1
        else:
            break
    return best


# ---------------------------------------------------------------- expansion


def expand(spec: MatrixFile) -> Iterable[Cell]:
    """Every combination, in file order; ruled-out cells carry their reason instead of vanishing."""
    for (base_name, base), lane, sgl, (tk_name, toolkit) in itertools.product(
        spec.bases.items(), spec.torch_lanes, spec.sglang, spec.toolkits.items()
    ):
        cell = Cell(
            base_name=base_name, base=base, lane=lane, sglang=sgl,
            toolkit_name=tk_name, toolkit=toolkit, archs=spec.archs,
        )
        reason = _excluded_because(cell, spec)
        expected = next((e for e in spec.expect if fnmatch.fnmatchcase(cell.id, e.match)), None)
        yield Cell(**{**cell.__dict__, "excluded": reason, "expected": expected})


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


# ---------------------------------------------------------------- selection


def select(
    cells: Sequence[Cell], only: Sequence[str] = (), skip: Sequence[str] = (), *, include_excluded: bool = False
) -> list[Cell]:
    """Cells whose id matches any `only` glob (all when empty) and no `skip` glob.

    A selection that matches nothing is an error, naming the patterns and a few ids that exist.
    """
    pool = [c for c in cells if include_excluded or c.excluded is None]
    chosen = [
        c for c in pool
        if (not only or any(fnmatch.fnmatchcase(c.id, p) for p in only))
        and not any(fnmatch.fnmatchcase(c.id, p) for p in skip)
    ]
    if not chosen:
        wanted = " ".join(f"--only {p!r}" for p in only) + " ".join(f" --skip {p!r}" for p in skip)
        sample = ", ".join(c.id for c in pool[:4]) or "(none: every cell is excluded)"
        ruled_out = [c.id for c in cells if c.excluded and any(fnmatch.fnmatchcase(c.id, p) for p in only)]
        extra = f" ({len(ruled_out)} excluded cell(s) match: see `nox -s matrix -- --all`)" if ruled_out else ""
        msg = f"the selection {wanted.strip() or '(all)'} matches no buildable cell{extra}"
        raise SelectionError(msg, hint=f"cell ids look like: {sample}")
    return chosen

