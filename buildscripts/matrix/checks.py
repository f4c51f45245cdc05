"""Checks across entries of matrix.yaml that one field's schema cannot make: repeated torch lanes and SGLang
releases, cell ids that collide, `expect` entries naming a stage or failure class that does not exist,
toolkits baking a server profile that `profiles:` does not define, and CUDA flavours that `cuda:` does not
declare (or declares with a version its name does not spell).

Each problem is (YAML path, message); `load` adds the line. The names an expectation may use come from
below this package on purpose (the import layers put `matrix` under `verify`): the stages from the
probe's ladder, the failure classes from the catalogue file that `verify.classify` validates in full.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ..results import LADDER
from . import yamlfile
from .cells import Cell
from .schema import FLAVOUR_HINT, MatrixFile, flavour_version

CATALOGUE = Path(__file__).resolve().parent.parent / "data" / "failures.yaml"
Problem = tuple[tuple[str | int, ...], str]


def problems(spec: MatrixFile) -> list[Problem]:
    return [*_flavour_versions(spec), *_undeclared_flavours(spec), *_repeated_lanes(spec), *_repeated_sglang(spec),
            *_unknown_expectations(spec), *_unknown_warm_profiles(spec)]


def _flavour_versions(spec: MatrixFile) -> list[Problem]:
    return [(("cuda", name, "version"), f"{name} is CUDA {flavour_version(name)}, not {flavour.version}: a flavour's "
             f"name spells its version (write version: \"{flavour_version(name)}\", or rename the flavour)")
            for name, flavour in spec.cuda.items() if flavour.version != flavour_version(name)]


def _undeclared_flavours(spec: MatrixFile) -> list[Problem]:
    """A lane or a toolkit recipe naming a flavour that `cuda:` does not declare."""
    found: list[Problem] = [(("torch_lanes", i, "cuda"), _undeclared(lane.cuda, list(spec.cuda)))
                            for i, lane in enumerate(spec.torch_lanes) if lane.cuda not in spec.cuda]
    found += [(("toolkits", name, "pip", flavour), _undeclared(flavour, list(spec.cuda)))
              for name, toolkit in spec.toolkits.items() for flavour in toolkit.pip if flavour not in spec.cuda]
    return found


def _undeclared(flavour: str, declared: list[str]) -> str:
    version = flavour_version(flavour)
    fix = (f"declare it under `cuda:` as `{flavour}: {{version: \"{version}\"}}`" if version
           else f"{FLAVOUR_HINT}, declared under `cuda:`")
    return f"{_unknown('CUDA flavour', flavour, declared)} ({fix})"


def _unknown_warm_profiles(spec: MatrixFile) -> list[Problem]:
    return [(("toolkits", name, "warm"), _unknown("server profile", profile, list(spec.profiles))
             + " (warm: names profiles from `profiles:`)")
            for name, toolkit in spec.toolkits.items() for profile in toolkit.warm_profiles
            if profile not in spec.profiles]


def duplicate_cells(cells: Sequence[Cell]) -> list[Problem]:
    """Two combinations with one id (e.g. toolkit `a-b` on base `c` and toolkit `a` on base `b-c`)."""
    seen: set[str] = set()
    found: list[Problem] = []
    for cell in cells:
        if cell.id in seen:
            found.append(((), f"two cells have the id {cell.id!r}: rename a base or toolkit so that ids stay unique"))
        seen.add(cell.id)
    return found


@cache
def failure_classes(path: Path = CATALOGUE) -> frozenset[str]:
    """The class ids of the failure catalogue (only the ids: verify.classify validates the rest)."""
    data, _ = yamlfile.parse(yamlfile.read_text(path, "failure catalogue"), path)
    classes = data.get("classes") if isinstance(data, dict) else None
    return frozenset(str(c["id"]) for c in classes or () if isinstance(c, dict) and "id" in c)


def _repeated_lanes(spec: MatrixFile) -> list[Problem]:
    first: dict[str, int] = {}
    found: list[Problem] = []
    for i, lane in enumerate(spec.torch_lanes):
        if lane.id in first:
            found.append((("torch_lanes", i),
                          f"torch lane {lane.id} is listed twice (first as entry {first[lane.id]})"))
        first.setdefault(lane.id, i)
    return found


def _repeated_sglang(spec: MatrixFile) -> list[Problem]:
    first: dict[str, int] = {}
    found: list[Problem] = []
    for i, entry in enumerate(spec.sglang):
        j = first.setdefault(entry.version, i)
        if j == i:
            continue
        earlier = spec.sglang[j]
        if earlier.torch != entry.torch:
            found.append((("sglang", i, "torch"), f"sglang {entry.version} pins torch {entry.torch} here and torch "
                          f"{earlier.torch} in entry {j}: a release pins one torch"))
        else:
            found.append((("sglang", i), f"sglang {entry.version} is listed twice (first as entry {j})"))
    return found


def _unknown_expectations(spec: MatrixFile) -> list[Problem]:
    found: list[Problem] = []
    classes = failure_classes()
    for i, exp in enumerate(spec.expect):
        for stage in exp.stages:
            if stage not in LADDER:
                found.append((("expect", i, "stage"), _unknown("stage", stage, LADDER)))
        if exp.failure_class is not None and exp.failure_class not in classes:
            found.append((("expect", i, "class"), _unknown("failure class", exp.failure_class, sorted(classes))
                          + " (see buildscripts/data/failures.yaml)"))
    return found


def _unknown(what: str, name: str, known: Sequence[Any]) -> str:
    close = difflib.get_close_matches(name, [str(k) for k in known], n=1)
    listed = ", ".join(map(str, known)) if len(known) <= 12 else f"{len(known)} names"
    suggestion = f"; did you mean {close[0]!r}?" if close else f"; known: {listed}"
    return f"unknown {what} {name!r}{suggestion}"
