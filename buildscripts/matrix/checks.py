"""Checks across entries of matrix.yaml that one field's schema cannot make: repeated torch lanes and SGLang
releases, cell ids that collide, `expect` entries naming a stage or failure class that does not exist,
toolkits baking a server profile that `profiles:` does not define, CUDA flavours that `cuda:` does not
declare (or declares with a version its name does not spell), and CI runners keyed by an arch or platform the
matrix does not build, or whose labels ask for another CPU than their platform's.

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
from .cijobs import labels_cpus
from .platforms import DEFAULT as DEFAULT_PLATFORM
from .platforms import by_oci
from .schema import MatrixFile
from .spellings import FLAVOUR_HINT, flavour_version

CATALOGUE = Path(__file__).resolve().parent.parent / "data" / "failures.yaml"
Problem = tuple[tuple[str | int, ...], str]


def problems(spec: MatrixFile) -> list[Problem]:
    return [*_flavour_versions(spec), *_undeclared_flavours(spec), *_repeated_lanes(spec), *_repeated_sglang(spec),
            *_unknown_expectations(spec), *_unknown_warm_profiles(spec), *_runner_problems(spec)]


def _runner_problems(spec: MatrixFile) -> list[Problem]:
    """`runners:` keyed by what the matrix builds, each label set of a platform asking for that platform's CPU."""
    runners = spec.runners
    found: list[Problem] = []
    built = list(spec.targets_by_platform)
    amd64 = spec.targets(DEFAULT_PLATFORM).archs
    for arch in runners.archs:
        if arch not in amd64:
            fix = (f"did you mean {close[0]!r}? " if (close := difflib.get_close_matches(arch, amd64, n=1)) else "")
            found.append((("runners", "archs", arch), (
                f"unknown arch {arch!r} under runners.archs, the GPU runners of linux/amd64 (its archs: "
                f"{', '.join(amd64) or 'none: the matrix builds no linux/amd64 cell'}); {fix}key per-arch labels "
                "by an arch of linux/amd64, or add the arch there (another platform's go under "
                "runners.platforms.PLATFORM.archs)")))
    for platform, theirs in runners.platforms.items():
        where: tuple[str | int, ...] = ("runners", "platforms", platform)
        if platform == DEFAULT_PLATFORM:
            found.append((where, f"{platform}'s runners are the top-level runners.default and runners.archs "
                                 "(and runners.build): give them there"))
            continue
        if platform not in built:
            found.append((where, f"the matrix builds no {platform} cell (its platforms: {', '.join(built)}): add "
                                 f"{platform} under `platforms:`, or drop its runners"))
            continue
        archs = spec.targets(platform).archs
        for arch in theirs.archs:
            if arch not in archs:
                close = difflib.get_close_matches(arch, archs, n=1)
                fix = f"; did you mean {close[0]!r}?" if close else ""
                found.append(((*where, "archs", arch), f"unknown arch {arch!r} for {platform} (its archs: "
                                                       f"{', '.join(archs)}){fix}"))
    return found + _runner_cpus(spec)


def _runner_cpus(spec: MatrixFile) -> list[Problem]:
    """Each GPU (and per-platform build or CPU) label set names its platform's CPU, so that a runner of another CPU
    with the same GPU never takes the job: an amd64 sm_90a job must not land on a GH200 (arm64, sm_90a)."""
    runners = spec.runners
    sets: list[tuple[tuple[str | int, ...], str, tuple[str, ...]]] = [
        (("runners", "default"), DEFAULT_PLATFORM, runners.default),
        *((("runners", "archs", a), DEFAULT_PLATFORM, labels) for a, labels in runners.archs.items())]
    for platform, theirs in runners.platforms.items():
        where = ("runners", "platforms", platform)
        sets += [((*where, key), platform, labels) for key, labels in
                 (("build", theirs.build), ("default", theirs.default), ("cpu", theirs.cpu)) if labels]
        sets += [((*where, "archs", a), platform, labels) for a, labels in theirs.archs.items()]
    found: list[Problem] = []
    for loc, platform, labels in sets:
        if platform not in spec.targets_by_platform:
            continue   # said above, or a matrix without amd64 cells: its top-level GPU runners are never used
        cpu, asked = by_oci(platform), labels_cpus(labels)
        if len(asked) > 1:
            found.append((loc, f"these labels name two CPUs ({', '.join(labels)}): no runner carries them all; keep "
                               f"{cpu.runner.lower()} ({platform})"))
        elif asked and asked[0] != cpu:
            found.append((loc, f"these labels ask for a {asked[0].oci} runner ({', '.join(labels)}) but the jobs are "
                               f"of {platform} cells: give them a {platform} runner's labels "
                               f"({cpu.runner.lower()}, or GitHub's {cpu.hosted})"))
        elif not asked and any(label.casefold() == "self-hosted" for label in labels):
            found.append((loc, f"a self-hosted runner's labels must name its CPU, so that a runner of another CPU "
                               f"with the same GPU never takes a {platform} job: add {cpu.runner.lower()} "
                               f"(GitHub gives every self-hosted runner its architecture's label)"))
    return found


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
