"""What an image's name leads to: the platform manifests it is, and the signed verdicts that belong to each.

- a registry reference by tag: the manifest digest the registry serves for it now (a tag moved after the
  promotion leads to the new digest, and to its verdicts: none, unless that image was verified too);
- a reference by digest: that digest;
- a local engine image: the digests the engine recorded when it pushed or pulled it (RepoDigests);
- `oci-archive:PATH`: the manifest the archive holds, read as the tools that load it read it (carried.py).
A digest that is an index leads to each of its platform manifests: a verdict names the platform manifest that
ran, so each platform holds its own verdicts, or none. Which platform must be verified is chosen as Docker
pulls: `--platform`, else this machine's os/architecture (`platform_of`, `choose`).
Registry verdicts come from cosign's attachments of REPO@DIGEST; an archive's travel beside it.
`check` is the one function a reader calls (the `check` command, `here`): with a History (seen.py) it refuses a
digest whose attachments went back since it last saw them, and keeps what it accepts (rollback.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .. import engine, platform_reading
from ..errors import CannotCheck, ConfigError, EngineError, NotVerified, RegistryError, ToolMissingError
from ..registry import manifests, references
from . import carried, cosign, described, rollback, verdicts
from .keys import PublicKey
from .seen import History

ARCHIVE = "oci-archive:"
SOURCE_KEY = "sglang-images-source"   # in a container's config: the image it was made from
SOURCE_LINE = re.compile(rf"{SOURCE_KEY}:\s*(\S+)")


ANY_PLATFORM = "any platform (the index entry names none)"


@dataclass(frozen=True)
class Source:
    """One manifest digest to check, and where its verdicts came from."""

    shown: str                 # how it was found, for people
    digest: str
    envelopes: tuple[Any, ...]
    platform: str | None = None   # os/architecture[/variant], when known (an index's entry, an archive's config)
    index: str | None = None      # the index that listed it, when it was reached through one
    refused: str | None = None    # why no verdict can count for it (an entry whose image is another platform's)
    seen: str | None = None       # what the reader's history says of it (rollback.py): first contact, newer, …
    described: tuple[Any, ...] = ()   # its SBOM and provenance envelopes (described.py): no verdicts, set aside


Judged = list[tuple[Source, verdicts.Judgement]]


def normalised(platform: str) -> str:
    """`platform` as Docker and containerd read it (platform_reading.py); an entry that names none stays as it is."""
    return platform if platform == ANY_PLATFORM else platform_reading.normalised(platform)


def matches(found: str | None, asked: str) -> bool:
    """`found` is a platform Docker takes for `asked` (platform_reading.py); an index entry that names no platform may
    be taken for any."""
    if found is None:
        return False
    return found == ANY_PLATFORM or platform_reading.matches(found, asked)


def ambiguous(judged: Judged) -> str | None:
    """Why an index `judged` came from is ambiguous: two of its entries are one platform to Docker (which
    one a loader takes then depends on its own rules), or one of them is spelled so that readers of images read
    it apart (platform_reading.py); None when none is."""
    seen: dict[tuple[str, str], str] = {}
    for source, _ in judged:
        spelled = None if source.platform in (None, ANY_PLATFORM) else platform_reading.written_problem(source.platform)
        if spelled:
            return f"{source.shown}: {spelled}"
        if source.index is not None and source.platform is not None:
            key = (source.index, normalised(source.platform))
            if key in seen:
                return (f"the index {source.index} lists two entries for {key[1]} (as {seen[key]} and "
                        f"{source.platform}): which one a loader takes depends on its rules")
            seen[key] = source.platform
    return None


def sources(what: str, env: Mapping[str, str]) -> list[Source]:
    """The manifest digest(s) `what` names and the verdicts attached to each; CannotCheck when they cannot be
    read, NotVerified when no digest can have a verdict (a local image never pushed, an archive carrying none)."""
    try:
        if what.startswith(ARCHIVE):
            found = carried.read(Path(what.removeprefix(ARCHIVE)))
            return [Source(f"{what} (tested as {found.repository}@{found.digest})", found.digest, found.envelopes,
                           found.platform)]
        if "@" in what:
            return _attached(what, what, env)
        local = _local_digests(what)
        if local is not None:
            if not local:
                msg = f"{what} is a local image that no registry digest names (never pushed, nor pulled by digest)"
                raise NotVerified(msg, hint="verdicts are attached to registry digests: pull the image from the "
                                            "registry by its good tag, or check the registry reference")
            return [s for ref in local for s in _attached(ref, f"{what} (local image, {ref})", env)]
        served = manifests.lookup(what, env)
        if served is None:
            msg = f"cannot check {what}: the registry serves no image of that name and tag"
            raise CannotCheck(msg, hint="check the name and tag (`skopeo list-tags docker://REPOSITORY`)")
        ref = f"{references.repository_of(what)}@{served.digest}"
        return _attached(ref, f"{what} (the registry serves {served.digest})", env, served)
    except manifests.AmbiguousManifest as exc:
        msg = f"{what} is not verified: {exc.message}"
        raise NotVerified(msg, hint=exc.hint) from None
    except (RegistryError, ToolMissingError) as exc:
        msg = f"cannot check {what}: {exc.message}"
        raise CannotCheck(msg, hint=exc.hint) from None


def _attached(ref: str, shown: str, env: Mapping[str, str], top: manifests.Manifest | None = None) -> list[Source]:
    """The verdicts of `ref`'s manifest; for an index, of each platform manifest it lists."""
    repository, digest = verdicts.split_digest_ref(ref)
    top = top or manifests.served(f"{repository}@{digest}", env)
    if not top.is_index:   # its platform is its config's: what `check --platform` compares
        return [Source(shown, digest, tuple(cosign.download(f"{repository}@{digest}", env)),
                       manifests.config_platform(f"{repository}@{digest}", env))]
    try:   # an index any entry of which readers of images read apart is refused whole (platform_reading.py)
        entries = platform_reading.listed(top.data.get("manifests"))
    except platform_reading.NotCanonical as exc:
        msg = f"{ref} is an index that readers of images read apart: {exc}"
        raise manifests.AmbiguousManifest(msg, hint=platform_reading.HINT) from None
    found = []
    for label, entry in entries:
        if label is not None and label.split("/")[0] == "unknown":
            continue   # an attestation manifest (buildx): no engine pulls it to run
        child = str(entry.get("digest"))
        name, refused = _entry_platform(f"{repository}@{child}", label, env)
        found.append(Source(f"{shown} -> {name} {child}", child, tuple(cosign.download(f"{repository}@{child}", env)),
                            name, digest, refused))
    return found


def _entry_platform(ref: str, label: str | None, env: Mapping[str, str]) -> tuple[str, str | None]:
    """The platform an index entry stands for, and why no verdict can count for it. An engine picks an entry by
    its label and runs the image its manifest names: a label that is not the image config's platform is refused
    (an amd64 image listed as arm64 never ran on arm64). An entry that names no platform is taken by containerd
    for the one its config names; one whose config names none too, for any platform."""
    child = manifests.served(ref, env)
    if child.is_index:
        return label or ANY_PLATFORM, "it is an index inside the index: no engine runs it as one platform's image"
    config = manifests.config_platform(ref, env)
    if label is None:
        return config or ANY_PLATFORM, None
    if config is not None and platform_reading.normalised(config) != platform_reading.normalised(label):
        return label, f"its {label} entry is a {config} image: nothing of it ran on {label}"
    return label, None


def _local_digests(what: str) -> list[str] | None:
    """The registry digests the local engine recorded for `what`; None when the engine has no such image (or
    no engine runs here: the reference is then read from its registry)."""
    import docker.errors

    try:
        client = engine.connect(timeout=30)
    except EngineError:
        return None
    try:
        image = client.images.get(what)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if "invalid reference" in str(exc).lower():
            return None
        raise
    finally:
        client.close()
    return [str(d) for d in image.attrs.get("RepoDigests") or []]


def check(what: str, trusted: Sequence[PublicKey], env: Mapping[str, str], archs: Sequence[str] = (), *,
          history: History | None, now: datetime | None = None) -> Judged:
    """Every manifest `what` leads to, judged by its verdicts (`summary` says which one must be verified) at
    `now` (default: this machine's clock; verdicts.judge). With a `history` (seen.py) a digest whose attachments
    went back since it was last seen is not verified, and what is accepted is kept (rollback.py); None keeps
    nothing (say why where you pass it)."""
    if not trusted:
        msg = "no public key to check with (keys/*.pub holds none, and no --key was given)"
        raise CannotCheck(msg, hint="pass --key PUB with the signer's public key")
    now = now or datetime.now(UTC)
    judged: Judged = []
    for found in sources(what, env):
        about = tuple(e for e in found.envelopes if described.is_described(e))   # they vouch for no arch
        verdict_like = [e for e in found.envelopes if not any(e is a for a in about)]
        weighed = rollback.weigh(found.digest, verdict_like, found.shown, trusted, history, now=now)
        source = dataclasses.replace(found, envelopes=weighed.envelopes, refused=weighed.refused or found.refused,
                                     seen=weighed.note or None, described=about)
        judgement = (verdicts.judge(source.envelopes, source.digest, trusted, archs, now=now)
                     if source.refused is None else
                     verdicts.Judgement(source.digest, (verdicts.ArchFinding("any arch", False, source.refused, ()),),
                                        ()))
        judged.append((source, dataclasses.replace(judgement, ignored=weighed.ignored + judgement.ignored)))
    return judged


def choose(judged: Judged, platform: str | None) -> tuple[list[Judged], str]:
    """The groups of manifests that must be verified, one group per image `what` leads to, and the platform
    asked. Of an index: every entry for `platform` (default: this machine's, as Docker pulls). Docker picks
    one of several that match (amd64 micro-architecture variants, an entry naming no platform) by its own
    preferences, so each of them must be verified: whichever Docker takes first, it was checked. Any other
    manifest as it is when no platform is asked; when one is, only if its platform (its config's, an archive's)
    is known and the one asked."""
    asked = platform or platform_reading.machine()
    groups: dict[str, Judged] = {}
    for source, judgement in judged:
        if source.index is not None:
            if matches(source.platform, asked):
                groups.setdefault(source.index, []).append((source, judgement))
        elif platform is None or (source.platform is not None and matches(source.platform, asked)):
            groups[source.digest] = [(source, judgement)]
    return list(groups.values()), asked


def _verified(source: Source, judgement: verdicts.Judgement) -> str:
    """`sm_100a (signed … (2 h ago)) for sha256:… (linux/amd64)`: which verdict decided, and how old it is."""
    archs = ", ".join(f"{f.arch} ({f.detail.rsplit('; ', 1)[-1]})" for f in judgement.archs)
    return f"{archs} for {source.digest}" + (f" ({source.platform})" if source.platform else "")


def summary(what: str, judged: Judged, platform: str | None = None) -> tuple[bool, str]:
    """(verified, one line saying so and why) for what `check` found, for `platform` (see `choose`)."""
    if not judged:
        return False, f"{what}: no manifest to check"
    why = ambiguous(judged)
    if why:
        return False, f"{what} is not verified: {why}"
    groups, asked = choose(judged, platform)
    for group in groups:
        if all(judgement.verified for _, judgement in group):
            return True, f"{what}: verified on {'; '.join(_verified(s, j) for s, j in group)} (signed verdicts)"
    if not groups:
        listed = ", ".join(sorted({s.platform for s, _ in judged if s.platform})) or "none"
        return False, f"{what} has no manifest for {asked} (its platforms: {listed}): nothing of it ran here"
    source, judgement = next(j for j in groups[0] if not j[1].verified)
    failing = [f for f in judgement.archs if not f.verified]
    said = "; ".join(f"{f.arch}: {f.detail}" for f in failing) or "no valid signed verdict is attached"
    where = f" ({source.platform})" if source.platform else ""
    return False, f"{what} is not verified for {source.digest}{where}: {said}"


def recorded_source(config: str | None) -> str | None:
    """The image a container's config says it came from: a comment line `SOURCE_KEY: IMAGE` (Proxmox writes
    the container's description there as comment lines, percent-encoded; in plain LXC add the line yourself).
    The host keeps the config, so a process inside the container cannot rewrite it."""
    for line in (config or "").splitlines():
        if line.lstrip().startswith("#"):
            found = SOURCE_LINE.search(unquote(line.lstrip()[1:]))
            if found:
                return found.group(1)
    return None


def source_verdict(config: str | None, trusted: Sequence[PublicKey], env: Mapping[str, str],
                   history: History | None) -> tuple[str, str]:
    """(pass | warn | skip, detail) for the image a container records as its source: a container whose image
    is not verified may still be ready for its GPU, so that is a warning, said with its reason."""
    source = recorded_source(config)
    if source is None:
        return "skip", (f"the container records no source image (a `{SOURCE_KEY}: oci-archive:PATH` line in its "
                        "description, which `nox -s export`'s note sets with pct create)")
    try:
        verified, line = summary(source, check(source, trusted, env, history=history))
    except (NotVerified, CannotCheck, ConfigError) as exc:
        return "warn", exc.message
    return ("pass" if verified else "warn"), line
