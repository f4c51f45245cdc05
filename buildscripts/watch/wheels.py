"""Which release a base can install, and what its metadata says: pins, runtime packages, CUDA flavour.

Pure functions over index answers (`DistFile`s, METADATA messages), so that they are unit-tested on real
metadata without a network. A base is judged as uv locks for it: its Python (`3.11` -> cp311) and its wheel
platform (`x86_64-manylinux_2_36`: every manylinux tag up to glibc 2.36 on that architecture).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.message import Message
from functools import cache

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..lock.drift import RUNTIMES, flavour_of
from .index import DistFile, normalize

# The packages that decide an SGLang's runtime, under the names they have had (report key -> names).
RUNTIME_PACKAGES: dict[str, tuple[str, ...]] = {
    "flashinfer": ("flashinfer-python",),
    "sglang-kernel": ("sglang-kernel", "sgl-kernel"),
    "deep-gemm": ("sgl-deep-gemm", "deep-gemm"),
}
LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


@dataclass(frozen=True)
class Platform:
    """The interpreter and wheel platform of a base (matrix.yaml `bases.NAME.python/platform`)."""

    python: str      # "3.11"
    platform: str    # "x86_64-manylinux_2_36"

    @property
    def shown(self) -> str:
        return f"cp{self.python.replace('.', '')} on {self.platform}"


@cache
def supported_tags(target: Platform) -> tuple[Tag, ...]:
    """Every wheel tag the base can install, most specific first (as pip orders them)."""
    arch, _, rest = target.platform.partition("-")
    glibc_minor = int(rest.rsplit("_", 1)[1])
    platforms: list[str] = []
    for minor in range(glibc_minor, 4, -1):
        platforms.append(f"manylinux_2_{minor}_{arch}")
        if (2, minor) in LEGACY_MANYLINUX:
            platforms.append(f"{LEGACY_MANYLINUX[2, minor]}_{arch}")
    version = tuple(int(p) for p in target.python.split(".")[:2])
    return (*cpython_tags(version, platforms=platforms),
            *compatible_tags(version, interpreter=f"cp{version[0]}{version[1]}", platforms=platforms))


def installable(files: Iterable[DistFile], target: Platform) -> tuple[DistFile | None, str]:
    """The wheel the base would install (the most specific tag), or None and the reason why there is none."""
    files = list(files)
    ranks = {tag: i for i, tag in enumerate(supported_tags(target))}
    python = Version(target.python + ".0")
    best: tuple[int, DistFile] | None = None
    too_new_python: list[str] = []
    wheels: list[str] = []
    for file in files:
        try:
            _, _, _, tags = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        wheels.append(file.filename)
        if file.requires_python and not _allows(file.requires_python, python):
            too_new_python.append(file.requires_python)
            continue
        rank = min((ranks[t] for t in tags if t in ranks), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, file)
    if best is not None:
        return best[1], ""
    if not wheels:
        kinds = sorted({f.filename.rsplit(".", 1)[-1] for f in files}) or ["none"]
        return None, f"no wheel at all (files: {', '.join(kinds)}); the base ({target.shown}) installs wheels only"
    if too_new_python and len(too_new_python) == len(wheels):
        return None, f"requires Python {too_new_python[0]}; the base has Python {target.python}"
    return None, f"no wheel for {target.shown}; there are: {_platforms(wheels)}"


def _allows(specifier: str, version: Version) -> bool:
    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except InvalidSpecifier:
        return True  # uv would ignore it too; the lock says more if it matters


def _platforms(filenames: Sequence[str]) -> str:
    found = sorted({str(tag).split("-", 1)[1] for name in filenames for tag in parse_wheel_filename(name)[3]})
    shown = ", ".join(found[:6])
    return shown + (f" and {len(found) - 6} more" if len(found) > 6 else "")


# ---------------------------------------------------------------- metadata


def requirements(metadata: Message, target: Platform) -> dict[str, Requirement]:
    """Requires-Dist that apply on the base (markers evaluated; extras left out), by normalised name."""
    environment = {
        "python_version": target.python, "python_full_version": target.python + ".0",
        "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
        "platform_machine": target.platform.partition("-")[0], "implementation_name": "cpython",
        "platform_python_implementation": "CPython", "extra": "",
    }
    found: dict[str, Requirement] = {}
    for line in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(str(line))
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate(environment):
            found.setdefault(normalize(requirement.name), requirement)
    return found


def exact_pin(requirement: Requirement | None) -> str | None:
    """X of `name==X` (one exact version, no wildcard), else None."""
    if requirement is None:
        return None
    specifiers = list(requirement.specifier)
    if len(specifiers) == 1 and specifiers[0].operator in ("==", "===") and "*" not in specifiers[0].version:
        return specifiers[0].version
    return None


def torch_pin(metadata: Message, target: Platform) -> tuple[str | None, str]:
    """(the torch version an SGLang release pins, "") or (None, why it pins none)."""
    wanted = requirements(metadata, target).get("torch")
    if wanted is None:
        return None, "its metadata requires no torch at all"
    pin = exact_pin(wanted)
    if pin is None:
        return None, f"its metadata asks for `{wanted}`, not one torch version"
    return pin, ""


def runtime_requirements(metadata: Message, target: Platform) -> dict[str, Requirement]:
    """The runtime packages an SGLang release requires, by report key (first name found wins)."""
    wanted = requirements(metadata, target)
    found: dict[str, Requirement] = {}
    for key, names in RUNTIME_PACKAGES.items():
        name = next((n for n in names if n in wanted), None)
        if name is not None:
            found[key] = wanted[name]
    return found


def toolkit_pin(metadata: Message, target: Platform) -> str | None:
    """The one cuda-toolkit version a torch wheel requires (`cuda-toolkit[...]==13.2.2` -> 13.2.2), if it pins one:
    the version a toolkit layer's recipe for a new flavour starts from."""
    return exact_pin(requirements(metadata, target).get("cuda-toolkit"))


def cuda_flavour(version: str, metadata: Message, target: Platform) -> tuple[str, str]:
    """(flavour, evidence) of a torch wheel: its local version (`+cu130`), else the CUDA runtime or
    toolkit it requires (`cuda-toolkit==13.0.3` -> cu130), else ("cpu", ...)."""
    try:
        local = Version(version).local
    except InvalidVersion:
        local = None
    if local and local.startswith("cu"):
        return local, f"its version {version}"
    wanted = requirements(metadata, target)
    for name in ("cuda-toolkit", *RUNTIMES):
        specifiers = [s for s in wanted[name].specifier if s.operator in ("==", "~=", ">=")] if name in wanted else []
        if specifiers:
            shown = f"{wanted[name].name}{wanted[name].specifier}"  # extras and markers left out
            return flavour_of(specifiers[0].version.rstrip(".*")), f"it requires {shown}"
    return "cpu", "it requires no CUDA runtime"
