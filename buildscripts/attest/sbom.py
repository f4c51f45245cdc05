"""The CycloneDX SBOM of one image, from its inventory (inventory.py) and the cell's locks, written by
cyclonedx-python-lib (never by hand): JSON of CycloneDX 1.6.

Each component says what kind it is in the property `sglang-images:kind` (KINDS), which `check --sbom` counts:
- `deb`: every package dpkg lists as installed (name, version, arch; `pkg:deb/debian/NAME@VERSION?arch=ARCH`);
- `python`: every distribution of the image's site folders (its METADATA's name and version), with the sha256s
  of the files the lock that installed it allows (`--hash` lines: one per wheel of that version) and that lock's
  name; `sglang-images:lock-match` says whether the installed version is the lock's;
- `cuda-toolkit`: the same for the CUDA toolkit's wheels (`nvidia-*`), the toolkit layer's recipe in the
  metadata's properties;
- `kernel-cache`: each baked kernel module of the warm report (images/warm/bake.py) with the archs it was built for.
The SBOM's subject component is the image: its repository and platform manifest digest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from ..lock import lockfile
from .inventory import Inventory

KIND = "sglang-images:kind"
KINDS = ("os", "deb", "python", "cuda-toolkit", "kernel-cache")
CUDA_WHEELS = ("nvidia-",)          # the CUDA toolkit's and libraries' wheels on PyPI


@dataclass(frozen=True, kw_only=True)
class Subject:
    """The image an SBOM is of: where it is, and the cell it was built as."""

    repository: str
    digest: str                        # sha256:… of the platform manifest
    cell_id: str
    apt: tuple[str, ...] = ()          # the cell's toolkit recipe (matrix.yaml `toolkits:`): its Debian packages
    pip: tuple[str, ...] = ()          # and its requirements for the cell's own CUDA flavour


def lock_pins(locks: Sequence[tuple[str, Path]]) -> dict[str, tuple[str, lockfile.Pin]]:
    """name -> (lock name, pin) of the locks in install order: a later layer's pin is the one installed."""
    found: dict[str, tuple[str, lockfile.Pin]] = {}
    for shown, path in locks:
        for name, pin in lockfile.read(path).pins.items():
            found[name] = (shown, pin)
    return found


def _props(**named: str) -> list[Property]:
    return [Property(name=f"sglang-images:{k.replace('_', '-')}" if k != "kind" else KIND, value=v)
            for k, v in named.items()]


def _python(dist_name: str, version: str, site: str, pins: Mapping[str, tuple[str, lockfile.Pin]]) -> Component:
    name = lockfile.normalize(dist_name)
    kind = "cuda-toolkit" if name.startswith(CUDA_WHEELS) else "python"
    props = _props(kind=kind, site=site)
    hashes: list[HashType] = []
    if name in pins:
        shown, pin = pins[name]
        props += _props(lock=shown, lock_version=pin.version, lock_match=str(pin.version == version).lower())
        if pin.version == version:
            hashes = [HashType(alg=HashAlgorithm.SHA_256, content=h.removeprefix("sha256:")) for h in pin.hashes]
    purl = PackageURL(type="pypi", name=name, version=version)
    return Component(name=name, version=version, type=ComponentType.LIBRARY, purl=purl, hashes=hashes,
                     properties=props, bom_ref=f"{purl}#{site}")


def components(inventory: Inventory, pins: Mapping[str, tuple[str, lockfile.Pin]]) -> list[Component]:
    found = []
    if inventory.os:
        name, version = inventory.os.get("ID", "linux"), inventory.os.get("VERSION_ID", "")
        found.append(Component(name=name, version=version, type=ComponentType.OPERATING_SYSTEM,
                               properties=_props(kind="os", codename=inventory.os.get("VERSION_CODENAME", "")),
                               bom_ref=f"os:{name}@{version}"))
    for deb in inventory.debian:
        purl = PackageURL(type="deb", namespace="debian", name=deb.name, version=deb.version,
                          qualifiers={"arch": deb.arch} if deb.arch else None)
        found.append(Component(name=deb.name, version=deb.version, type=ComponentType.LIBRARY, purl=purl,
                               properties=_props(kind="deb"), bom_ref=str(purl)))
    found += [_python(d.name, d.version, d.site, pins) for d in inventory.python]
    for cache in inventory.baked:
        found.append(Component(name=cache.module, type=ComponentType.DATA, bom_ref=f"kernel-cache:{cache.module}",
                               properties=_props(kind="kernel-cache", archs=" ".join(cache.archs),
                                                 profile=cache.profile, module_kind=cache.kind)))
    return found


def bom(inventory: Inventory, subject: Subject, locks: Sequence[tuple[str, Path]]) -> Bom:
    made = Bom()
    made.metadata.component = Component(
        name=subject.repository, version=subject.digest, type=ComponentType.CONTAINER,
        bom_ref=f"image:{subject.digest}",
        properties=_props(cell=subject.cell_id, toolkit_apt=" ".join(subject.apt), toolkit_pip=" ".join(subject.pip),
                          warm_archs=" ".join(inventory.warm_archs)))
    listed = components(inventory, lock_pins(locks))
    for component in listed:
        made.components.add(component)
    made.register_dependency(made.metadata.component, listed)   # the image holds each: a complete graph
    return made


def to_json(made: Bom) -> str:
    """The SBOM as CycloneDX 1.6 JSON, written by the library."""
    return JsonV1Dot6(made).output_as_string(indent=None)
