"""Good tags across platforms: a tag names the verified manifest of each platform whose cell earned it.

Good tags are rendered from a cell's axes, and the templates need no platform: the linux/amd64 and linux/arm64
cells of one SGLang, torch lane and toolkit render the same tags, so that one name pulls on an x86_64 B200
machine and on a GB200. A good tag therefore points at
- the platform manifest itself while one platform's cell holds it (all a single-platform matrix ever gives); or
- an index of one manifest per platform once several do, each entry there only with its own verdict.

A promotion plans every tag before it writes any. The platforms it promotes get their verified manifests. Each
other entry the tag serves now is kept only when a trusted key signed a passing verdict for that platform's cell
that renders this tag (on the tag's arch, for a per-arch tag): an earlier promotion. An entry nobody vouched for
was written by someone else: refused, nothing written, unless --repair, which drops it. Every entry's platform
is read from its image's config, and must be the platform of the cell it is promoted or kept for. An index's
bytes follow from its entries alone (platform order, Docker's list type when every entry is a Docker manifest,
else OCI's), so the same manifests give the same digest again; `check --platform` reads each platform's
verdicts off its entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import log, platform_reading, strictjson
from ..errors import RegistryError, ResultsError
from ..matrix import Cell, Matrix, tagtemplates
from ..registry import manifests, references
from ..results import tag_form
from ..trust import cosign, verdicts
from ..trust.keys import PublicKey
from . import tags as tag_policy

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
APART = "make the `tags: good:` templates of matrix.yaml tell the cells of one platform apart (e.g. with {base})"


@dataclass(frozen=True)
class Entry:
    """One platform's manifest as an index lists it."""

    platform: str      # as the image's config names it: os/architecture[/variant]
    digest: str
    media_type: str
    size: int

    @property
    def key(self) -> str:
        return platform_reading.normalised(self.platform)

    def descriptor(self) -> dict[str, object]:
        os, architecture, *variant = self.platform.split("/")
        named = {"architecture": architecture, "os": os, **({"variant": variant[0]} if variant else {})}
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, "platform": named}


@dataclass(frozen=True)
class Claim:
    """A platform manifest that this promotion's records verified, and the tags its cell earned with it."""

    cell_id: str
    platform: str                  # the cell's, from matrix.yaml (linux/arm64)
    digest: str                    # the platform manifest
    tags: tuple[str, ...]
    tag_archs: Mapping[str, str]   # per-arch tag -> its arch, as tags spell it

    def arch_of(self, tag: str) -> str | None:
        return self.tag_archs.get(tag)


@dataclass(frozen=True)
class TagPlan:
    """Where one tag goes: the entries it will name, and what it serves now."""

    tag: str
    claimants: tuple[str, ...]     # the cells promoted to it now
    entries: tuple[Entry, ...]     # in platform order
    current: str | None

    @property
    def index(self) -> bytes | None:
        """The index the tag is written as, or None when it names one manifest."""
        if len(self.entries) < 2:
            return None
        docker = all(e.media_type == DOCKER_MANIFEST for e in self.entries)
        data = {"schemaVersion": 2, "mediaType": DOCKER_LIST if docker else OCI_INDEX,
                "manifests": [e.descriptor() for e in self.entries]}
        return (json.dumps(data, indent=3) + "\n").encode()

    @property
    def target(self) -> str:
        index = self.index
        return manifests.digest_of(index) if index is not None else self.entries[0].digest


def describe(ref: str, env: Mapping[str, str], *, log_file: Path | None = None) -> Entry:
    """`ref` (REPO@sha256:…) as an entry of an index: a single-platform manifest, its platform from its config."""
    data = manifests.raw(ref, env, log=log_file)
    manifest = strictjson.loads_object(data)
    media_type = str(manifest.get("mediaType") or OCI_MANIFEST)
    if media_type in manifests.INDEX_TYPES or "manifests" in manifest:
        msg = f"{ref} is an index, where one platform's manifest was expected"
        raise RegistryError(msg, hint="promote the platform manifest that was verified (its record's platform digest)")
    platform = manifests.config_platform(ref, env, log=log_file)
    if platform is None:
        msg = f"{ref}: its image config names no os and architecture"
        raise RegistryError(msg, hint="the image was not written by a build of this project; verify and stage it again")
    return Entry(platform, manifests.digest_of(data), media_type, len(data))


def claimed_entry(claim: Claim, source: str, env: Mapping[str, str], *, log_file: Path | None = None) -> Entry:
    """The entry of `claim`'s manifest, read from `source`; RegistryError unless its image is the cell's platform."""
    entry = describe(f"{source}@{claim.digest}", env, log_file=log_file)
    if not platform_reading.matches(entry.platform, claim.platform):
        msg = (f"{claim.cell_id} is a {claim.platform} cell, but {source}@{claim.digest} is a {entry.platform} image: "
               "the digest in the results is not an image of this cell; no tag was moved")
        raise RegistryError(msg, hint="use the results the verifier wrote for that cell's digest, or verify it again")
    return entry


def plan(claims: Sequence[tuple[Claim, Entry]], matrix: Matrix, dest: str, env: Mapping[str, str],
         keys: Sequence[PublicKey], *, repair: bool, log_file: Path | None = None) -> list[TagPlan]:
    """Every tag the claims earned, per-arch tags first (an arch-free tag is never ahead of the arch tags it sums
    up), with its entries; RegistryError for an entry of what a tag serves now that no verdict vouches for."""
    names = [t for c, _ in claims for t in c.tags if c.arch_of(t)]
    names += [t for c, _ in claims for t in c.tags if not c.arch_of(t)]
    plans = []
    for tag in dict.fromkeys(names):
        new: dict[str, tuple[Claim, Entry]] = {}
        for claim, entry in claims:
            if tag in claim.tags and entry.key in new:
                msg = (f"{new[entry.key][0].cell_id} and {claim.cell_id} are cells of one platform ({entry.platform}) "
                       f"that render the same good tag {tag}")
                raise ResultsError(msg, hint=APART)
            if tag in claim.tags:
                new[entry.key] = (claim, entry)
        tagged = Tagged(tag, next((c.arch_of(tag) for c, _ in new.values() if c.arch_of(tag)), None),
                        tuple(c.cell_id for c, _ in new.values()))
        current, kept = _kept(tagged, new, matrix, dest, env, keys, repair=repair, log_file=log_file)
        entries = sorted([*(e for _, e in new.values()), *kept], key=lambda e: e.key)
        plans.append(TagPlan(tag, tagged.claimants, tuple(entries), current))
    return plans


@dataclass(frozen=True)
class Tagged:
    """A tag being planned: its arch (a per-arch tag) and the cells promoted to it now."""

    tag: str
    arch: str | None
    claimants: tuple[str, ...]


Listed = list[tuple[str | None, str]]   # (platform or None, manifest digest)


def serving(ref: str, env: Mapping[str, str], log_file: Path | None = None) -> tuple[str | None, Listed]:
    """The digest the tag `ref` serves now and the (platform, manifest) pairs it names: an index's entries as
    labelled, or the manifest itself with its config's platform (None where none can be read). A pair whose
    manifest is the digest served is a plain manifest; an index's entries are other digests."""
    top = manifests.lookup(ref, env, log=log_file)
    if top is None:
        return None, []
    if top.is_index:
        try:
            listed = platform_reading.listed(top.data.get("manifests"))
        except platform_reading.NotCanonical as exc:
            msg = f"{ref} serves {top.digest}, an index that readers of images read apart: {exc}"
            raise manifests.AmbiguousManifest(msg, hint=platform_reading.HINT) from None
        return top.digest, [(platform, str(e.get("digest") or "")) for platform, e in listed]
    try:
        platform = manifests.config_platform(f"{references.repository_of(ref)}@{top.digest}", env, log=log_file)
    except RegistryError:
        platform = None
    return top.digest, [(platform, top.digest)]


def _kept(tagged: Tagged, new: Mapping[str, tuple[Claim, Entry]], matrix: Matrix, dest: str, env: Mapping[str, str],
          keys: Sequence[PublicKey], *, repair: bool, log_file: Path | None) -> tuple[str | None, list[Entry]]:
    """What the tag serves now, and its entries of other platforms than `new`'s to keep: those an earlier
    promotion wrote (a trusted verdict for that platform's cell vouches for them, as for this very tag)."""
    ref = f"{dest}:{tagged.tag}"
    current, listed = serving(ref, env, log_file)
    groups: dict[str | None, list[str]] = {}
    for platform, digest in listed:
        groups.setdefault(platform_reading.normalised(platform) if platform else None, []).append(digest)
    kept: list[Entry] = []
    for key, digests in groups.items():
        unique = list(dict.fromkeys(digests))
        if key is not None and key in new and digests == [new[key][1].digest]:
            continue   # the very manifest promoted now
        outcomes = [(d, *_vouched(tagged, key, f"{dest}@{d}", new, matrix, env, keys, log_file)) for d in unique]
        shown = f"{current} ({key or 'an entry naming no platform'}: {', '.join(unique)})" \
            if len(listed) > 1 or key is None or current != digests[0] else str(current)
        if len(digests) > 1:   # two entries of one platform: which one an engine pulls is its own choice
            why: str | None = f"lists {len(digests)} manifests for {key}"
            vouched = [entry for _, not_vouched, entry in outcomes if not_vouched is None]
            keep = vouched if len(vouched) == 1 else []   # --repair keeps the one manifest a verdict vouches for
        else:
            _, why, entry = outcomes[0]
            keep = [entry] if why is None else []
        if why is not None and not repair:
            msg = (f"{', '.join(tagged.claimants)}: {ref} serves {shown}, which {why}: someone other than a "
                   "promotion moved it; nothing was moved back")
            raise RegistryError(msg, hint="promotion cannot tell a tamper from a push by hand: find out who moved "
                                          "it; to point it at the verified digests again (dropping what no verdict "
                                          "vouches for), promote with --repair")
        if why is not None:
            log.info(f"{ref}: {shown} {why}; keeping {len([e for e in keep if e])} of its manifests (--repair)")
        kept += [e for e in keep if e is not None]
    return current, kept


Outcome = tuple[str | None, Entry | None]   # why not kept (None: vouched for), and the entry to keep


def _vouched(tagged: Tagged, key: str | None, where: str, new: Mapping[str, tuple[Claim, Entry]], matrix: Matrix,
             env: Mapping[str, str], keys: Sequence[PublicKey], log_file: Path | None) -> Outcome:
    """Why the manifest `where` (listed for platform `key`) is no earlier promotion of the tag, or None and its
    entry to keep (None when a manifest promoted now replaces it)."""
    if key is None:
        return "names no platform", None
    cell = next(c for c in matrix.cells if c.id == new[key][0].cell_id) if key in new else \
        _sibling(matrix, key, tagged.tag)
    if cell is None:
        return f"is {key}, for which no cell of the matrix renders {tagged.tag}", None
    required = tag_policy.required_archs(cell, matrix) if tagged.arch is None else []
    why = _not_vouched(where, keys, env, cell.id, tagged.arch, required, log_file=log_file)
    if why is not None or key in new:
        return why, None
    try:
        entry = describe(where, env, log_file=log_file)
    except RegistryError as exc:   # an index where a platform's manifest belongs, a config naming no platform
        return exc.message.removeprefix(f"{where} ").removeprefix(f"{where}: "), None
    if platform_reading.normalised(entry.platform) != key:
        return f"is a {entry.platform} image listed as {key}", None
    return None, entry


def _sibling(matrix: Matrix, platform: str, tag: str) -> Cell | None:
    """The cell of `platform` whose good tags include `tag` (None: no such cell)."""
    cfg = matrix.spec.tags
    found = [c for c in matrix.cells if platform_reading.normalised(c.platform) == platform
             and f"{cfg.repository}:{tag}" in tagtemplates.named(cfg, c.axes(), [tag_form(a) for a in c.archs],
                                                              every_arch=True)]
    if len(found) > 1:
        msg = f"cells {', '.join(c.id for c in found)} of {platform} render the same good tag {tag}"
        raise ResultsError(msg, hint=APART)
    return found[0] if found else None


def _not_vouched(ref: str, keys: Sequence[PublicKey], env: Mapping[str, str], cell_id: str, arch: str | None,
                 required: Sequence[str], *, log_file: Path | None) -> str | None:
    """Why no verdict a trusted key signed shows `ref` (REPO@sha256:…) earned the tag as cell `cell_id`, or None
    when verdicts do. A per-arch tag: the newest verdict on `arch`'s family passed, for this cell. An arch-free
    tag, as promotion grants it (bydigest): this cell verified on at least one arch and on each of `required`,
    and no newest verdict on any arch that did not pass. Another cell's verified image, or this one's verified
    on another arch only, is no earlier promotion of this tag. A verdict names the platform manifest that ran:
    for an index, its platforms' verdicts are read."""
    repository, digest = verdicts.split_digest_ref(ref)
    top = manifests.lookup(ref, env, log=log_file)
    digests = top.children() if top is not None and top.is_index else [digest]
    findings = [f for d in digests for f in verdicts.judge(
        cosign.download(f"{repository}@{d}", env, log_file=log_file), d, keys, [arch] if arch else ()).archs]
    mine = [f for f in findings if f.verified and all(v.cell == cell_id for v in f.verdicts)]
    if arch is None:
        failed = sorted({f.arch for f in findings if f.verdicts and not f.verified})
        if failed:
            return f"carries a newest verdict that did not pass on {', '.join(failed)}: no arch-free tag was earned"
        missing = [a for a in required if a not in {tag_form(f.arch) for f in mine}]
        if mine and missing:
            return f"is verified as {cell_id} without {', '.join(missing)}, which its arch-free tag needs"
    if mine:
        return None
    if any(f.verified for f in findings):
        named = sorted({f"{v.cell or 'no cell (an older verifier)'} on {f.arch}" for f in findings if f.verified
                        for v in f.verdicts})
        return f"carries passing verdicts for {', '.join(named)}, none for {cell_id}" + (f" on {arch}" if arch else "")
    return "carries no verdict of a trusted key" if not findings else \
        "carries no passing verdict of a trusted key (" + "; ".join(f.detail for f in findings) + ")"


def write(tag_plan: TagPlan, dest: str, env: Mapping[str, str], *, log_file: Path | None = None) -> str:
    """Point the tag at its plan's target (a manifest copied within `dest`, or the index written) and read it
    back; return the digest it serves."""
    ref, target = f"{dest}:{tag_plan.tag}", tag_plan.target
    if tag_plan.current != target:
        log.info(f"{ref}: {tag_plan.current or 'new'} -> {target}"
                 + (f" (index of {', '.join(e.platform for e in tag_plan.entries)})" if tag_plan.index else ""))
        index = tag_plan.index
        if index is None:
            manifests.copy(f"{dest}@{target}", ref, env, log=log_file)
        else:
            manifests.write_index(ref, index, env, log=log_file)
    served = manifests.served(ref, env, log=log_file).digest
    if served != target:
        msg = f"{ref} serves {served} right after it was pointed at {target}"
        raise RegistryError(msg, hint="another writer moved it meanwhile; promote again, alone")
    return served
