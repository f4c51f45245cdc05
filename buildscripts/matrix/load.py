"""Load matrix.yaml: parse, validate against the schema, and explain every problem with its YAML line
and a did-you-mean."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from . import checks, yamlfile
from .cells import Matrix, expand
from .schema import MatrixFile


def load(path: Path, env: Mapping[str, str] | None = None) -> Matrix:
    """Read and validate matrix.yaml. `env` is accepted for symmetry with other loaders (tests pass {})."""
    del env  # nothing in the schema reads the environment yet
    return parse(yamlfile.read_text(path, "matrix file"), path)


def parse(text: str, path: Path) -> Matrix:
    data, root = yamlfile.parse(text, path)  # parsed once, by libyaml; limits and duplicate keys checked there
    if not isinstance(data, dict):
        msg = f"{path}: expected a mapping at the top level, got {type(data).__name__}"
        raise ConfigError(msg, hint="start from the matrix.yaml in the project root")
    try:
        spec = MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path, root), hint="see the comments in matrix.yaml") from None
    _raise_problems(checks.problems(spec), path, root)
    cells = tuple(expand(spec))
    _raise_problems(checks.duplicate_cells(cells), path, root)
    return Matrix(spec=spec, path=path, cells=cells)


def _raise_problems(problems: list[checks.Problem], path: Path, root: yaml.Node | None) -> None:
    """The cross-entry problems `checks` found, each with its YAML path and line."""
    if not problems:
        return
    lines = [f"{path}: {len(problems)} problem(s)"]
    for loc, message in problems:
        line = _line_of(root, loc)
        where = f"line {line}: " if line else ""
        lines.append(f"  {where}{'.'.join(map(str, loc)) or '(top level)'}: {message}")
    raise ConfigError("\n".join(lines), hint="see the comments in matrix.yaml")


def _explain(exc: ValidationError, path: Path, root: yaml.Node | None) -> str:
    lines = [f"{path}: {exc.error_count()} problem(s)"]
    for err in exc.errors():
        loc = tuple(part for part in err["loc"] if part != "[key]")  # a bad mapping key: its own path says it
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
        if isinstance(part, int):
            continue
        if get_origin(current) is dict:  # `part` is one of its keys (a base, a toolkit, a flavour): into its value
            current = get_args(current)[1]
            continue
        current = _model_in(current)
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(str(part)) or next(
            (f for f in current.model_fields.values() if f.alias == part), None
        )
        if info is None:
            return []
        current = info.annotation
    current = _model_in(current)
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
