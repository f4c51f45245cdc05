"""The images `here` chooses among, and what each says of itself: from a registry, or from a results file.

- `--repository REGISTRY/REPO`: its tags (the registry's list), each the manifest the registry serves for it now
  (an index of platforms, or one manifest), the manifest of this machine's platform in it, and that image's config:
  its labels (io.sglang-images.cell, .cuda, .archs, .sglang: what the build wrote) and its Env (where its caches
  are). The tags read are the good tags of this GPU's arch, as the tag policy spells them (`…-verified-sm120`),
  or the ones `--tag` names. Read through the project's registry client (registry/manifests.py: skopeo).
- `--report FILE`: a results file (`results.json`, as `build`, `verify` and `report` write it): the run's record,
  the source every report is rendered from, read with its schema (results/store.py). It names each cell's image
  by registry digest (what was staged or promoted), its targets and CUDA; a Markdown or HTML report is a rendering
  for people that leaves out the digests a choice needs.
What either says is a description for choosing, never evidence: whether the chosen digest was verified is read
from the signed verdicts attached to it (checked.py), and a label can say anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .. import platform_reading, strictjson
from ..errors import RegistryError
from ..matrix.platforms import DEFAULT as DEFAULT_PLATFORM
from ..matrix.schema import LABEL_PREFIX
from ..matrix.spellings import flavour_version
from ..registry import manifests, references
from ..results import CellResult, store, tag_form

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")   # what a verdict names, and so all `here` takes an image by


@dataclass(frozen=True)
class Candidate:
    """One image, as it describes itself."""

    shown: str                          # REPO:TAG, or the cell of a results file
    repository: str                     # REGISTRY/REPO
    reference: str                      # REPO@sha256:… of what was read (an index, or one manifest)
    platforms: tuple[str, ...]          # the platforms it holds
    platform_digest: str | None         # the manifest for this machine's platform in it (None: it holds none)
    cell: str | None = None
    sglang: str | None = None
    cuda: str | None = None             # 13.0
    targets: tuple[str, ...] = ()       # sm_90a, sm_100a, …
    env: tuple[tuple[str, str], ...] = ()   # the image config's Env (empty when not read)
    tag: str | None = None
    described_by: str = ""              # where the description came from
    refused: str | None = None          # why it cannot be taken at all (an index that readers read apart)


class RegistryReader(Protocol):
    """What `here` reads of a registry (registry/manifests.py; a fake in tests)."""

    def tags(self, repository: str) -> list[str]: ...

    def manifest(self, ref: str) -> manifests.Manifest | None: ...

    def config(self, ref: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Skopeo:
    """The registry as the project's client reads it."""

    env: Mapping[str, str]

    def tags(self, repository: str) -> list[str]:
        return manifests.tags(repository, self.env)

    def manifest(self, ref: str) -> manifests.Manifest | None:
        return manifests.lookup(ref, self.env)

    def config(self, ref: str) -> dict[str, Any]:
        try:
            return strictjson.loads_object(manifests.raw(ref, self.env, config=True))
        except strictjson.Ambiguous as exc:
            msg = f"the image config of {ref} is ambiguous ({exc})"
            raise manifests.AmbiguousManifest(msg, hint="readers of images would disagree what it holds") from None


def arch_tags(tags: Sequence[str], arch: str, asked: Sequence[str] = ()) -> list[str]:
    """The tags to read: those asked for, else the good tags of `arch` (`-verified-sm120` for sm_120)."""
    if asked:
        return list(dict.fromkeys(asked))
    suffix = f"-verified-{tag_form(arch)}"
    return sorted(t for t in tags if t.endswith(suffix))


def from_registry(reader: RegistryReader, repository: str, platform: str, arch: str,
                  asked: Sequence[str] = ()) -> list[Candidate]:
    """Each tag's image as its registry describes it, for `platform`."""
    found = []
    for tag in arch_tags(reader.tags(repository), arch, asked):
        top = reader.manifest(f"{repository}:{tag}")
        if top is None:
            if asked:
                msg = f"the registry serves no image for {repository}:{tag}"
                raise RegistryError(msg, hint=f"list the tags with `skopeo list-tags docker://{repository}`")
            continue
        try:
            found.append(_described(reader, repository, tag, top, platform))
        except (platform_reading.NotCanonical, manifests.AmbiguousManifest) as exc:
            found.append(Candidate(f"{repository}:{tag}", repository, f"{repository}@{top.digest}", (), None, tag=tag,
                                   refused=f"readers of images read it apart ({exc}): do not use it"))
    return found


def _described(reader: RegistryReader, repository: str, tag: str, top: manifests.Manifest,
               platform: str) -> Candidate:
    reference = f"{repository}@{top.digest}"
    if top.is_index:
        os, _, architecture = platform.partition("/")
        entries = platform_reading.listed(top.data.get("manifests"))
        platforms = tuple(sorted({p for p, _ in entries if p and not p.startswith("unknown/")}))
        child = top.platform(os, architecture)
        if child is not None and not DIGEST.fullmatch(child):
            msg = f"its {platform} entry names {child[:80]!r}, not a sha256 digest"
            raise manifests.AmbiguousManifest(msg, hint="the index is not one this project wrote")
    else:
        config = reader.config(reference)
        named = platform_reading.read(config, required=False)
        platforms = (named,) if named else ()
        child = top.digest if named and platform_reading.matches(named, platform) else None
    labels, env = _config_parts(reader.config(f"{repository}@{child}") if child else {})
    return Candidate(f"{repository}:{tag}", repository, reference, platforms, child, **_labelled(labels), env=env,
                     tag=tag, described_by=f"the labels of {repository}@{child}" if child else "its index")


def _config_parts(config: Mapping[str, Any]) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """An image config's labels and Env (`KEY=VALUE`), whatever else it holds (a config is the image's word)."""
    inner = config.get("config")
    inner = inner if isinstance(inner, dict) else {}
    raw_labels, raw_env = inner.get("Labels"), inner.get("Env")
    labels = {str(k): str(v) for k, v in raw_labels.items()} if isinstance(raw_labels, dict) else {}
    pairs = (str(e).partition("=") for e in raw_env) if isinstance(raw_env, list) else iter(())
    return labels, tuple((k, v) for k, sep, v in pairs if sep)


def _labelled(labels: Mapping[str, str]) -> dict[str, Any]:
    """What the build's labels say of an image: its cell, SGLang, CUDA and targets."""
    get = labels.get
    flavour = get(f"{LABEL_PREFIX}.cuda") or ""
    return {"cell": get(f"{LABEL_PREFIX}.cell"), "sglang": get(f"{LABEL_PREFIX}.sglang"),
            "cuda": flavour_version(flavour) or (flavour or None),
            "targets": tuple((get(f"{LABEL_PREFIX}.archs") or "").split())}


def from_results(path: Path) -> list[Candidate]:
    """Each image a results file names by registry digest, as its record describes it."""
    run = store.load(path)
    found: list[Candidate] = []
    for cell in run.cells:
        for ref, digest in _registry_refs(cell):
            repository = references.repository_of(ref)
            platform = cell.image.labels.get(f"{LABEL_PREFIX}.platform") or DEFAULT_PLATFORM
            ran = cell.image.platform_digest   # when `digest` is an index: the platform manifest that ran
            chosen = ran if digest == cell.image.digest and ran and DIGEST.fullmatch(ran) else digest
            tag = ref.rsplit(":", 1)[1] if "@" not in ref and ":" in ref.rsplit("/", 1)[-1] else None
            found.append(Candidate(
                ref if tag else cell.cell_id, repository, f"{repository}@{chosen}", (platform,), chosen,
                cell.cell_id, cell.axes.get("sglang"), flavour_version(cell.axes.get("cuda", "")),
                tuple(cell.targets), tag=tag, described_by=f"the record of {cell.cell_id} in {path} (unsigned)"))
    return found


def _registry_refs(cell: CellResult) -> list[tuple[str, str]]:
    """(reference, digest) of each registry copy of the cell's image: its promoted tags, else where it was staged."""
    if cell.excluded:
        return []
    refs = [(ref, digest) for ref, digest in sorted(cell.promoted.items()) if DIGEST.fullmatch(digest)
            and references.by_digest(f"{references.repository_of(ref)}@{digest}")]
    if not refs and cell.image.repository and cell.image.digest and DIGEST.fullmatch(cell.image.digest) \
            and references.by_digest(f"{cell.image.repository}@{cell.image.digest}"):
        refs = [(f"{cell.image.repository}@{cell.image.digest}", cell.image.digest)]
    return refs
