"""What an image's name leads to: the digest it is, and the signed verdicts that belong to that digest.

- a registry reference by tag: the manifest digest the registry serves for it now (a tag moved after the
  promotion leads to the new digest, and to its verdicts: none, unless that image was verified too);
- a reference by digest: that digest;
- a local engine image: the digests the engine recorded when it pushed or pulled it (RepoDigests);
- `oci-archive:PATH`: the tested digest its carried verdicts name, once the archive is shown to hold that
  image (carried.py).
Registry verdicts come from cosign's attachments of REPO@DIGEST; an archive's travel beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .. import distribution, engine
from ..errors import CannotCheck, ConfigError, EngineError, NotVerified, RegistryError, ToolMissingError
from . import carried, cosign, verdicts
from .keys import PublicKey

ARCHIVE = "oci-archive:"
SOURCE_KEY = "sglang-images-source"   # in a container's config: the image it was made from
SOURCE_LINE = re.compile(rf"{SOURCE_KEY}:\s*(\S+)")


@dataclass(frozen=True)
class Source:
    """One digest to check, and where its verdicts came from."""

    shown: str                 # how it was found, for people
    digest: str
    envelopes: tuple[Any, ...]


def sources(what: str, env: Mapping[str, str]) -> list[Source]:
    """The digest(s) `what` names and the verdicts attached to each; CannotCheck when they cannot be read,
    NotVerified when no digest can have a verdict (a local image never pushed, an archive carrying none)."""
    try:
        if what.startswith(ARCHIVE):
            found = carried.read(Path(what.removeprefix(ARCHIVE)))
            return [Source(f"{what} (tested as {found.repository}@{found.digest})", found.digest, found.envelopes)]
        if "@" in what:
            return [_attached(what, what)]
        local = _local_digests(what)
        if local is not None:
            if not local:
                msg = f"{what} is a local image that no registry digest names (never pushed, nor pulled by digest)"
                raise NotVerified(msg, hint="verdicts are attached to registry digests: pull the image from the "
                                            "registry by its good tag, or check the registry reference")
            return [_attached(ref, f"{what} (local image, {ref})") for ref in local]
        served = distribution.lookup(what, env)
        if served is None:
            msg = f"cannot check {what}: the registry serves no image of that name and tag"
            raise CannotCheck(msg, hint="check the name and tag (`skopeo list-tags docker://REPOSITORY`)")
        ref = f"{distribution.repository_of(what)}@{served.digest}"
        return [_attached(ref, f"{what} (the registry serves {served.digest})")]
    except (RegistryError, ToolMissingError) as exc:
        msg = f"cannot check {what}: {exc.message}"
        raise CannotCheck(msg, hint=exc.hint) from None


def _attached(ref: str, shown: str) -> Source:
    repository, digest = verdicts.split_digest_ref(ref)
    return Source(shown, digest, tuple(cosign.download(f"{repository}@{digest}")))


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


Judged = list[tuple[Source, verdicts.Judgement]]


def check(what: str, trusted: Sequence[PublicKey], env: Mapping[str, str], archs: Sequence[str] = ()) -> Judged:
    """Every digest `what` leads to, judged by its verdicts (the image is verified when one of them is)."""
    if not trusted:
        msg = "no public key to check with (keys/*.pub holds none, and no --key was given)"
        raise CannotCheck(msg, hint="pass --key PUB with the signer's public key")
    return [(source, verdicts.judge(source.envelopes, source.digest, trusted, archs)) for source in sources(what, env)]


def summary(what: str, judged: Judged) -> tuple[bool, str]:
    """(verified, one line saying so and why) for what `check` found."""
    for source, judgement in judged:
        if judgement.verified:
            archs = ", ".join(f.arch for f in judgement.archs)
            return True, f"{what}: verified on {archs} for {source.digest} (signed verdicts)"
    if not judged:
        return False, f"{what}: no digest to check"
    source, judgement = judged[0]
    failing = [f for f in judgement.archs if not f.verified]
    said = "; ".join(f"{f.arch}: {f.detail}" for f in failing) or "no valid signed verdict is attached"
    return False, f"{what} is not verified for {source.digest}: {said}"


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


def source_verdict(config: str | None, trusted: Sequence[PublicKey], env: Mapping[str, str]) -> tuple[str, str]:
    """(pass | warn | skip, detail) for the image a container records as its source: a container whose image
    is not verified may still be ready for its GPU, so that is a warning, said with its reason."""
    source = recorded_source(config)
    if source is None:
        return "skip", (f"the container records no source image (a `{SOURCE_KEY}: oci-archive:PATH` line in its "
                        "description, which `nox -s export`'s note sets with pct create)")
    try:
        verified, line = summary(source, check(source, trusted, env))
    except (NotVerified, CannotCheck, ConfigError) as exc:
        return "warn", exc.message
    return ("pass" if verified else "warn"), line
