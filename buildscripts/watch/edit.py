"""The matrix.yaml change a proposal makes, as text: comments, order and layout of the file stay as they are.

For each new SGLang: an `sglang:` entry with the torch its metadata pins; a `torch_lanes:` entry where no
lane has that torch; where that lane's CUDA flavour is new, its `cuda:` entry and, for each toolkit with pip
recipes, a recipe for it (the toolkit's recipe for the newest flavour of the same CUDA major, its cuda-toolkit
pin moved to the one the new torch requires; without such a start the new cells of that toolkit are excluded
with the reason, as any cell without a recipe); and, for a new cell that no `expect:` entry covers while the
same cell of the newest SGLang before it is expected to fail, that expectation carried over with its reason
(exclusions are globs and apply to the new cells as they are). Each entry is appended after the last item of
its list (or mapping), in the style of that item, and the result is loaded and validated like any matrix.yaml
before it is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from ..errors import ProposalError
from ..lock.drift import major_minor
from ..matrix import Cell, Matrix, parse
from ..matrix.schema import Expectation
from ..matrix.spellings import flavour_version
from ..matrix.yamlfile import parse as parse_yaml
from .index import normalize
from .news import NewSGLang
from .wheels import exact_pin


@dataclass(frozen=True)
class Change:
    text: str                 # the proposed matrix.yaml
    matrix: Matrix            # it, loaded and validated
    added: list[str]          # one line per entry added, for the report
    new_cells: list[Cell]     # the cells of the new SGLang releases (excluded ones too, with their reasons)


def propose(text: str, matrix: Matrix, releases: Sequence[NewSGLang]) -> Change:
    versions = [r.version for r in releases]
    lines = text.splitlines(keepends=True)
    lanes = [f"{{torch: {_scalar(r.new_lane['torch'])}, cuda: {r.new_lane['cuda']}}}" for r in releases
             if r.new_lane is not None]
    entries = [f"{{version: {_scalar(r.version)}, torch: {_scalar(r.torch or '')}}}" for r in releases]
    flavours = {r.new_flavour["name"]: r.new_flavour for r in releases if r.new_flavour is not None}
    lines, added = _declare(lines, flavours, matrix)
    lines = _append(lines, "torch_lanes", list(dict.fromkeys(lanes)))
    lines = _append(lines, "sglang", entries)
    added += [f"torch_lanes: {lane}" for lane in dict.fromkeys(lanes)] + [f"sglang: {e}" for e in entries]
    with_releases = _load("".join(lines), matrix)
    carried = _carried(with_releases, matrix, versions)
    if carried:
        lines = _append(lines, "expect", [_expectation(e) for e in carried])
        added += [f"expect: {e.match} at {', '.join(e.stages)} ({e.reason})" for e in carried]
    proposed = _load("".join(lines), matrix)
    new_cells = [c for c in proposed.cells if c.sglang.version in versions]
    return Change("".join(lines), proposed, added, new_cells)


def _declare(lines: list[str], flavours: Mapping[str, Mapping[str, str]],
             matrix: Matrix) -> tuple[list[str], list[str]]:
    """The new CUDA flavours under `cuda:`, and each toolkit's recipe for them where one can be derived."""
    added: list[str] = []
    for name, flavour in flavours.items():
        entry = f'{name}: {{version: "{flavour["version"]}"}}'
        lines = _add_entries(lines, ("cuda",), [entry])
        added.append(f"cuda: {entry}")
        for toolkit_name, toolkit in matrix.spec.toolkits.items():
            derived = _recipe(toolkit.pip, name, flavour["toolkit"])
            if derived is None:
                continue
            source, recipe = derived
            lines = _add_entries(lines, ("toolkits", toolkit_name, "pip"), [f"{name}: {json.dumps(list(recipe))}"])
            added.append(f"toolkits.{toolkit_name}.pip: {name}: {json.dumps(list(recipe))} ({source}'s recipe, pinned "
                         f"to the cuda-toolkit {flavour['toolkit']} that the new torch requires)")
    return lines, added


def _recipe(recipes: Mapping[str, Sequence[str]], flavour: str, toolkit: str) -> tuple[str, tuple[str, ...]] | None:
    """(the flavour it starts from, the recipe) of a toolkit for the new `flavour`: its recipe for the newest flavour
    of the same CUDA major, each `cuda-toolkit==X` moved to `toolkit`. None without such a recipe, without a
    cuda-toolkit version of the new flavour's CUDA, or where the recipe holds anything else (whose version for the
    new CUDA nobody can tell from the index): then its cells are excluded until a recipe is written by hand."""
    version = flavour_version(flavour) or ""
    if not toolkit or major_minor(toolkit) != version:
        return None
    major = version.split(".")[0]
    same = [f for f in recipes if (flavour_version(f) or "").split(".")[0] == major]
    if not same:
        return None
    source = max(same, key=lambda f: Version(flavour_version(f) or "0"))
    moved: list[str] = []
    for line in recipes[source]:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            return None
        pin = exact_pin(requirement)
        if normalize(requirement.name) != "cuda-toolkit" or pin is None:
            return None
        moved.append(re.sub(rf"==\s*{re.escape(pin)}(?![0-9.])", f"=={toolkit}", line))
    return source, tuple(moved)


def _load(text: str, matrix: Matrix) -> Matrix:
    try:
        return parse(text, matrix.path)
    except Exception as exc:  # a ConfigError: the edit, not the user's file, is wrong here
        msg = f"the proposed change does not make a valid {matrix.path.name}: {exc}"
        raise ProposalError(msg, hint="report it with the watch's JSON (`nox -s watch -- --json`); "
                                      "add the release to matrix.yaml by hand meanwhile") from None


def _carried(proposed: Matrix, before: Matrix, versions: Sequence[str]) -> list[Expectation]:
    """Expectations of the newest earlier SGLang's cells, for the new cells that no entry covers."""
    found: dict[str, Expectation] = {}
    for cell in proposed.cells:
        if cell.sglang.version not in versions or cell.excluded is not None or cell.expected is not None:
            continue
        earlier = twin(cell, before)
        if earlier is None or earlier.expected is None:
            continue
        was = earlier.expected
        match = f"sglang{cell.sglang.version}-*-{cell.toolkit_name}-{cell.base_name}"
        found.setdefault(match, Expectation(match=match, stage=was.stage, failure_class=was.failure_class,
                                            reason=f"as sglang {earlier.sglang.version} ({earlier.id}): "
                                                   f"{was.reason}"))
    return list(found.values())


def twin(cell: Cell, before: Matrix) -> Cell | None:
    """The same cell of the newest SGLang that `before` holds: same toolkit and base, same lane where it has
    one (a new lane's cell is compared with the newest SGLang's cell on its own lane)."""
    newest = max((s.version for s in before.spec.sglang), key=Version)
    same = [c for c in before.buildable() if c.sglang.version == newest
            and (c.toolkit_name, c.base_name) == (cell.toolkit_name, cell.base_name)]
    return next((c for c in same if c.lane.id == cell.lane.id), same[0] if same else None)


def _expectation(e: Expectation) -> str:
    stage = e.stage if isinstance(e.stage, str) else json.dumps(list(e.stage))
    lines = [f"match: {json.dumps(e.match)}", f"stage: {stage}"]
    if e.failure_class:
        lines.append(f"class: {e.failure_class}")
    lines.append(f"reason: {json.dumps(e.reason)}")
    return "\n".join(lines)


def _scalar(value: str) -> str:
    """A version as YAML reads it back as the same text (`2.15` alone would be a float)."""
    return value if yaml.safe_load(value) == value else json.dumps(value)


def _add_entries(lines: list[str], path: Sequence[str], entries: list[str]) -> list[str]:
    """`entries` (`key: value` text) added after the last entry of the block mapping at `path`."""
    _, node = parse_yaml("".join(lines), Path("matrix.yaml"))
    for key in path:
        node = next((v for k, v in node.value if k.value == key), None) if isinstance(node, yaml.MappingNode) else None
    where = ".".join(path)
    if not isinstance(node, yaml.MappingNode) or node.flow_style or not node.value:
        msg = f"matrix.yaml's `{where}:` is not a block mapping with entries (`name: ...` lines) the watch extends"
        raise ProposalError(msg, hint=f"write `{where}:` as a block mapping, or add the entry by hand")
    key, value = node.value[-1]
    indent = " " * key.start_mark.column
    return _insert_after(lines, key.start_mark.line, value, [f"{indent}{entry}\n" for entry in entries])


def _insert_after(lines: list[str], first: int, last: yaml.Node, new: list[str]) -> list[str]:
    """`new` lines after the last line of content (not a comment) from line `first` to the end of node `last`."""
    end = last.end_mark.line if last.end_mark.column == 0 else last.end_mark.line + 1
    content = [i for i in range(first, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")]
    after = content[-1] + 1
    if not lines[after - 1].endswith("\n"):
        lines = [*lines[: after - 1], lines[after - 1] + "\n", *lines[after:]]
    return [*lines[:after], *new, *lines[after:]]


def _append(lines: list[str], key: str, items: list[str]) -> list[str]:
    """`items` added after the last item of the top-level list `key` (created at the end when absent)."""
    if not items:
        return lines
    _, root = parse_yaml("".join(lines), Path("matrix.yaml"))
    node = next((v for k, v in root.value if k.value == key), None) if isinstance(root, yaml.MappingNode) else None
    if node is None:
        body = "".join(_item("  ", item) for item in items)
        tail = "" if not lines or lines[-1].endswith("\n") else "\n"
        return [*lines, f"{tail}{key}:\n", body]
    if not isinstance(node, yaml.SequenceNode) or node.flow_style or not node.value:
        msg = f"matrix.yaml's `{key}:` is not a block list with items (`- ...` lines), which the watch extends"
        raise ProposalError(msg, hint=f"write `{key}:` as a block list, or add the entry by hand")
    last = node.value[-1]
    first_line = lines[node.value[0].start_mark.line]  # `  - {...}`: the item starts on its dash's line
    indent = first_line[: len(first_line) - len(first_line.lstrip())]
    return _insert_after(lines, last.start_mark.line, last, [_item(indent, item) for item in items])


def _item(indent: str, item: str) -> str:
    first, *rest = item.split("\n")
    return "".join([f"{indent}- {first}\n", *(f"{indent}  {line}\n" for line in rest)])
