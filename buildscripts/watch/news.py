"""What the index holds that matrix.yaml does not, and what follows from each release.

- a newer SGLang: the torch it pins (from its metadata), the lane that torch needs (one that exists, or
  a new one in the CUDA flavour that torch's wheel brings, declared anew where matrix.yaml's `cuda:` has
  no such flavour yet), its runtime packages;
- a newer torch: its CUDA flavour, and whether a new SGLang pins it (else it is listed, not built);
- room: a runtime package (FlashInfer, sglang-kernel, deep_gemm) newer than the lock holds, where an
  SGLang's requirement is a range rather than one version;
- skipped: yanked releases and pre-releases; a release without a wheel for a base is listed with why.
One `Findings` value holds it all; the console lines and `--json` are both rendered from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import PackageIndexError
from ..hostenv import ca_bundle, index_urls
from ..matrix import Matrix
from ..matrix.spellings import flavour_version
from .index import DistFile, Index, Project, SimpleIndex
from .wheels import Platform, cuda_flavour, exact_pin, installable, runtime_requirements, toolkit_pin, torch_pin

HOST = ""  # the key of the host's index among the indexes a matrix uses (lanes may name their own)


def make_indexes(matrix: Matrix, env: Mapping[str, str], timeout_s: float) -> tuple[dict[str, Index], list[str]]:
    """The host's index (its pip settings, uv's order) and each lane's own; and how to name them."""
    host = index_urls(env)
    bundle = ca_bundle(env)
    merge = env.get("UV_INDEX_STRATEGY", "first-index").startswith("unsafe-")
    indexes: dict[str, Index] = {HOST: SimpleIndex(host, timeout_s=timeout_s, ca_bundle=bundle, merge=merge)}
    shown = [f"the host's package index ({(' + ' if merge else ' then ').join(host)})"]
    for lane in matrix.spec.torch_lanes:
        if lane.index and lane.index not in indexes:
            indexes[lane.index] = SimpleIndex([lane.index], timeout_s=timeout_s, ca_bundle=bundle)
            shown.append(f"lane {lane.id}'s index ({lane.index})")
    return indexes, shown


@dataclass(frozen=True)
class NewSGLang:
    version: str
    torch: str | None = None              # the torch its metadata pins
    lane: str | None = None               # the matrix's lane with that torch, when there is one
    new_lane: dict[str, str] | None = None  # {"torch": ..., "cuda": ...}: the lane it needs
    # {"name": "cu132", "version": "13.2", "toolkit": "13.2.2" or ""}: the CUDA flavour that lane needs, where
    # matrix.yaml declares none of that name (toolkit: the cuda-toolkit its torch pins, for the toolkit recipes)
    new_flavour: dict[str, str] | None = None
    runtime: dict[str, str] = field(default_factory=dict)  # report key -> its requirement
    problem: str | None = None            # why it cannot be proposed
    follows: str = ""


@dataclass(frozen=True)
class NewTorch:
    version: str
    index: str
    cuda: str | None = None
    evidence: str = ""
    pinned_by: tuple[str, ...] = ()
    problem: str | None = None
    follows: str = ""


@dataclass(frozen=True)
class Room:
    sglang: str
    package: str
    requirement: str
    newest: str
    locked: str
    follows: str


@dataclass(frozen=True)
class Skipped:
    package: str
    version: str
    reason: str


@dataclass
class Findings:
    indexes: list[str]
    held: dict[str, str]                  # {"sglang": newest in matrix.yaml, "torch": newest lane torch}
    sglang: list[NewSGLang] = field(default_factory=list)
    torch: list[NewTorch] = field(default_factory=list)
    room: list[Room] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def new(self) -> bool:
        return bool(self.sglang or self.torch or self.room)

    def proposable(self) -> list[NewSGLang]:
        return [s for s in self.sglang if s.problem is None]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["new"] = self.new
        data["proposable"] = [s.version for s in self.proposable()]
        return data

    def lines(self) -> list[str]:
        shown = ", ".join(self.indexes)
        lines = [f"asked {shown} for releases newer than matrix.yaml's"]
        lines += [f"new sglang {s.version}: {s.follows}" for s in self.sglang]
        for t in self.torch:
            flavour = f" ({t.cuda}: {t.evidence})" if t.cuda else ""
            lines.append(f"new torch {t.version}{flavour}: {t.follows}")
            if t.problem:
                lines.append(f"  {t.problem}")
        lines += [f"room: {r.follows}" for r in self.room]
        lines += [f"skipped {s.package} {s.version}: {s.reason}" for s in self.skipped]
        lines += [f"note: {n}" for n in self.notes]
        if not self.new:
            lines.append("nothing new")
        return lines


# ---------------------------------------------------------------- the watch


def watch(matrix: Matrix, indexes: Mapping[str, Index], locked: Mapping[str, Mapping[str, str]],
          shown: Iterable[str]) -> Findings:
    """Releases on the index newer than `matrix` holds. `indexes[HOST]` is the host's index, other keys the
    lanes' own; `locked` is lockfiles/index.json's versions per cell id."""
    spec = matrix.spec
    targets = {name: Platform(base.python, base.platform) for name, base in spec.bases.items()}
    held_sglang = max((s.version for s in spec.sglang), key=Version)
    held_torch = max((lane.torch for lane in spec.torch_lanes), key=Version)
    found = Findings(indexes=list(shown), held={"sglang": held_sglang, "torch": held_torch})
    reader = _Reader(indexes[HOST], targets)
    sglang = reader.project("sglang")
    metadata = {version: reader.metadata(sglang, version) for version in _held(spec.sglang)}
    for version, files in _newer(sglang, held_sglang, found.skipped):
        entry, meta = _new_sglang(version, files, reader, matrix)
        found.sglang.append(entry)
        if meta is not None:
            metadata[version] = meta
    newest_pin = _newest_pin(metadata, reader)
    for source, index in indexes.items():
        lanes = [lane for lane in spec.torch_lanes if (lane.index or HOST) == source]
        if lanes:
            torch_reader = reader if source == HOST else _Reader(index, targets)
            found.torch += _new_torch(torch_reader, max((lane.torch for lane in lanes), key=Version),
                                      found.sglang, newest_pin, found.skipped, declared=set(spec.cuda))
    found.room = _room(metadata, reader, matrix, locked)
    found.notes += [f"sglang {v} of matrix.yaml is not on the index" for v, m in metadata.items() if m is None]
    return found


class _Reader:
    """Index answers the watch reuses (a project's page is asked for once), judged for the matrix's bases."""

    def __init__(self, index: Index, targets: Mapping[str, Platform]) -> None:
        self.index, self.targets = index, targets
        self.projects: dict[str, Project] = {}

    def project(self, name: str) -> Project:
        if name not in self.projects:
            project = self.index.project(name)
            if project is None:
                msg = f"the package index has no project {name!r}"
                raise PackageIndexError(msg, hint="is the host's pip index the right one? (PIP_INDEX_URL, pip.conf, "
                                                  "UV_DEFAULT_INDEX)")
            self.projects[name] = project
        return self.projects[name]

    def wheel(self, files: list[DistFile]) -> tuple[DistFile | None, dict[str, str]]:
        """The first base's wheel, and why each base that has none has none."""
        chosen: DistFile | None = None
        missing: dict[str, str] = {}
        for name, target in self.targets.items():
            wheel, reason = installable(files, target)
            if wheel is None:
                missing[name] = reason
            chosen = chosen or wheel
        return chosen, missing

    def metadata(self, project: Project, version: str) -> Message | None:
        files = [f for f in releases(project).get(Version(version), []) if f.yanked is None]
        wheel, _ = self.wheel(files)
        return self.index.metadata(wheel) if wheel is not None else None

    @property
    def target(self) -> Platform:
        return next(iter(self.targets.values()))


def releases(project: Project) -> dict[Version, list[DistFile]]:
    """A project's files by version (names that are neither a wheel nor an sdist are left out)."""
    found: dict[Version, list[DistFile]] = {}
    for file in project.files:
        try:
            version = (parse_wheel_filename(file.filename)[1] if file.filename.endswith(".whl")
                       else parse_sdist_filename(file.filename)[1])
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        found.setdefault(version, []).append(file)
    return found


def _held(entries: Iterable[Any]) -> list[str]:
    return sorted({e.version for e in entries}, key=Version)


def _newer(project: Project, held: str, skipped: list[Skipped]) -> list[tuple[str, list[DistFile]]]:
    """Releases after `held`, oldest first; yanked releases and pre-releases go to `skipped`."""
    newer: list[tuple[str, list[DistFile]]] = []
    for version, files in sorted(releases(project).items()):
        if Version(version.public) <= Version(Version(held).public):
            continue
        live = [f for f in files if f.yanked is None]
        if version.is_prerelease or version.is_devrelease:
            skipped.append(Skipped(project.name, str(version), "a pre-release"))
        elif not live:
            why = next((f.yanked for f in files if f.yanked), "") or "no reason given"
            skipped.append(Skipped(project.name, str(version), f"yanked ({why})"))
        else:
            newer.append((str(version), live))
    return newer


def _new_sglang(version: str, files: list[DistFile], reader: _Reader,
                matrix: Matrix) -> tuple[NewSGLang, Message | None]:
    wheel, missing = reader.wheel(files)
    if wheel is None:
        why = "; ".join(f"base {name}: {reason}" for name, reason in missing.items())
        return NewSGLang(version, problem=why, follows=f"listed, not proposed: {why}"), None
    meta = reader.index.metadata(wheel)
    runtime = {key: str(req) for key, req in runtime_requirements(meta, reader.target).items()}
    torch, why = torch_pin(meta, reader.target)
    if torch is None:
        problem = f"{why} ({wheel.filename}): no lane can be chosen for it"
        return NewSGLang(version, runtime=runtime, problem=problem,
                         follows=f"listed, not proposed: {problem}; add it to matrix.yaml by hand with the torch "
                                 "it needs"), meta
    lane = next((lane for lane in matrix.spec.torch_lanes if Version(lane.torch) == Version(torch)), None)
    if lane is not None:
        follows = f"pins torch {torch}, which lane {lane.id} has: its cells go on that lane"
        return NewSGLang(version, torch, lane=lane.id, runtime=runtime, follows=follows), meta
    flavour, evidence, toolkit, refused = _torch_flavour(reader, torch)
    if refused is not None:
        return NewSGLang(version, torch, runtime=runtime, problem=refused,
                         follows=f"pins torch {torch}: listed, not proposed: {refused}"), meta
    follows = f"pins torch {torch} ({flavour}: {evidence}), which no lane has: a new lane torch{torch}-{flavour}"
    new_flavour = None
    if flavour not in matrix.spec.cuda:
        new_flavour = {"name": flavour, "version": flavour_version(flavour) or "", "toolkit": toolkit or ""}
        follows += f", in a new CUDA flavour {flavour} (CUDA {new_flavour['version']})"
    return NewSGLang(version, torch, new_lane={"torch": torch, "cuda": flavour}, new_flavour=new_flavour,
                     runtime=runtime, follows=follows), meta


def _torch_flavour(reader: _Reader, version: str) -> tuple[str, str, str | None, str | None]:
    """(flavour, evidence, the cuda-toolkit it pins, why no lane of it can be declared) of torch `version`."""
    files = [f for f in releases(reader.project("torch")).get(Version(version), []) if f.yanked is None]
    wheel, missing = reader.wheel(files)
    if wheel is None:
        why = "; ".join(missing.values()) or "not on the index"
        return "", "", None, f"torch {version} cannot be installed on the bases: {why}"
    metadata = reader.index.metadata(wheel)
    flavour, evidence = cuda_flavour(version, metadata, reader.target)
    return flavour, evidence, toolkit_pin(metadata, reader.target), _flavour_problem(flavour)


def _flavour_problem(flavour: str) -> str | None:
    """Why no lane can be made of a torch of `flavour`: only a CUDA build (cuXYZ) makes one."""
    if flavour_version(flavour) is not None:
        return None
    return f"{flavour} is not a CUDA build of torch (a lane is a torch in a CUDA flavour such as cu130)"


def _newest_pin(metadata: Mapping[str, Message | None], reader: _Reader) -> str:
    """How the newest SGLang that pins a torch says it, for a torch no SGLang pins: " (the newest, ...)"."""
    known = sorted((v for v, m in metadata.items() if m is not None), key=Version, reverse=True)
    for rank, version in enumerate(known):
        meta = metadata[version]
        pin = torch_pin(meta, reader.target)[0] if meta is not None else None
        if pin is not None:
            which = "the newest" if rank == 0 else "the newest that pins one"
            return f" ({which}, sglang {version}, pins torch {pin})"
    return ""


def _new_torch(reader: _Reader, held: str, sglang: list[NewSGLang], newest_pin: str,
               skipped: list[Skipped], *, declared: set[str]) -> list[NewTorch]:
    found: list[NewTorch] = []
    project = reader.project("torch")
    for version, files in _newer(project, held, skipped):
        wheel, missing = reader.wheel(files)
        if wheel is None:
            why = "; ".join(f"base {name}: {reason}" for name, reason in missing.items())
            found.append(NewTorch(version, project.index, problem=why, follows=f"listed, not built: {why}"))
            continue
        flavour, evidence = cuda_flavour(version, reader.index.metadata(wheel), reader.target)
        pinned_by = tuple(s.version for s in sglang if s.torch and Version(s.torch) == Version(version))
        problem = _flavour_problem(flavour)
        new = "" if problem or flavour in declared else f", in the new CUDA flavour {flavour}"
        if pinned_by:
            follows = f"pinned by sglang {', '.join(pinned_by)}: " + (
                f"a new lane is proposed for it{new}" if problem is None else "no lane can be proposed for it")
        else:
            follows = f"no SGLang release pins it yet{newest_pin}: listed, not built"
            follows += f" (its lane would be{new.removeprefix(',')})" if new else ""
        found.append(NewTorch(version, project.index, flavour, evidence, pinned_by, problem, follows))
    return found


def _room(metadata: Mapping[str, Message | None], reader: _Reader, matrix: Matrix,
          locked: Mapping[str, Mapping[str, str]]) -> list[Room]:
    """Runtime packages newer than an SGLang's lock holds, where its requirement leaves room for them."""
    found: list[Room] = []
    for version, meta in metadata.items():
        if meta is None:
            continue
        held = [locked[c.id] for c in matrix.buildable() if c.sglang.version == version and c.id in locked]
        for key, requirement in runtime_requirements(meta, reader.target).items():
            was = next((v[key] for v in held if key in v), None)
            if exact_pin(requirement) is not None or was is None:
                continue   # one version, or nothing locked yet to compare with (a new SGLang's lock takes the newest)
            allowed = [v for v, files in releases(reader.project(requirement.name)).items()
                       if not v.is_prerelease and requirement.specifier.contains(v)
                       and reader.wheel([f for f in files if f.yanked is None])[0] is not None]
            newest = max(allowed, default=None)
            if newest is not None and newest > Version(was):
                cells = f"sglang{version}-*"
                found.append(Room(version, requirement.name, str(requirement), str(newest), was,
                                  f"{requirement.name} {newest} fits sglang {version}'s `{requirement}` (its lock has "
                                  f"{was}): `nox -s lock -- --upgrade --only '{cells}'` takes it"))
    return found
