"""Signed verdicts carried with an OCI archive: NAME.oci.tar.verdicts.json beside it.

The archive holds the tested platform manifest byte for byte (export copies REPO@PLATFORM_DIGEST with
`skopeo copy --preserve-digests`; the cell's annotations go on index.json's descriptor, which is no part of
the manifest), so its manifest digest is the very digest the verdicts name. `read` reads the archive as the
tools that load it do (ociarchive.py: duplicate members, links, stray blobs refused; every blob hashed) and
compares that digest with what the verdicts file claims: nothing is compared field by field.

Beside, not inside: the archive must stay the one-manifest layout that `pct create` and LXC's oci template
take; an OCI layout could list the verdicts as referrers in index.json, but no tool on the way to a container
carries referrers on, and a second manifest there is one that a tool taking the first or only one may pick.
The file holds the envelopes (the verdicts, their snapshot, and the image's signed SBOM and provenance:
described.py) and what they are for (repository, digest, platform, the index it was chosen
from); a file whose claims are not the archive's is refused. The archive's .sha256 file lists both files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import log, strictjson
from ..errors import CannotCheck, NotVerified
from ..registry import manifests
from . import cosign, described, dsse, ociarchive, snapshot, verdicts
from .keys import PublicKey

SUFFIX = ".verdicts.json"
# The fields of the verdicts file, with the image formats' (strictjson: none may be spelled in another case).
FIELDS = strictjson.FIELDS | {"schema", "repository", "index", "attestations"}
SCHEMA = "sglang-images/carried-verdicts/v2"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Tested:
    """One tested platform manifest and its verdicts: what export takes from the registry and writes beside
    the archive, and what `read` finds there once the archive is shown to hold that manifest."""

    repository: str
    digest: str                 # the platform manifest that ran: the archive's manifest, the verdicts' subject
    index: str | None           # the index it was chosen from, when the tested reference was one
    platform: str               # os/architecture[/variant]
    envelopes: tuple[Any, ...]

    @property
    def source(self) -> str:
        """What skopeo copies from: the platform manifest itself (an index would be copied whole)."""
        return f"{self.repository}@{self.digest}"


def sidecar(archive: Path) -> Path:
    return archive.with_name(archive.name + SUFFIX)


def gather(ref: str, trusted: Sequence[PublicKey], env: Mapping[str, str], *,
           platform: tuple[str, str] = ("linux", "amd64")) -> Tested | None:
    """The platform manifest of `ref` (REPO@sha256:…; an index's manifest for `platform`) with its verdicts,
    when a trusted key signed one for it and an archive can hold it byte for byte (None, said, otherwise)."""
    repository, _ = verdicts.split_digest_ref(ref)
    located = manifests.locate(ref, env, platform=platform)
    digest = located.platform_digest or located.digest
    own = f"{repository}@{digest}"
    attached = cosign.download(own, env)
    good = tuple(e for e in attached if _counts(e, digest, trusted))
    if not good:
        return None
    # its SBOM and provenance travel too (described.py), but never make an archive of an image with no verdict
    good += tuple(e for e in attached if _describes(e, digest, trusted))
    manifest = manifests.served(own, env)
    if manifest.media_type != OCI_MANIFEST:
        log.warn(f"{own} is a {manifest.media_type or 'typeless'} manifest: an OCI archive holding it byte for "
                 "byte is one that Proxmox and LXC's oci template do not load (they take OCI image manifests), "
                 "so its verdicts cannot travel with an archive; stage images as OCI manifests")
        return None
    return Tested(repository, digest, located.digest if located.platform_digest else None, "/".join(platform), good)


def _counts(envelope: Any, digest: str, trusted: Sequence[PublicKey]) -> bool:
    """A verdict a trusted key signed for `digest`; a malformed one too, so that the archive is judged as the
    registry's digest is (it leaves no arch verified); and a snapshot of them (snapshot.py), so that a reader of
    the archive is held to it as a reader of the registry is (rollback.py)."""
    if snapshot.is_snapshot(envelope):
        try:
            return snapshot.open_snapshot(envelope, trusted).digest == digest
        except NotVerified:
            return False
    try:
        return digest in verdicts.open_verdict(envelope, trusted).digests
    except verdicts.MalformedVerdict as exc:
        return not exc.digests or digest in exc.digests
    except NotVerified:
        return False


def _describes(envelope: Any, digest: str, trusted: Sequence[PublicKey]) -> bool:
    """An SBOM or provenance a trusted key signed for `digest`."""
    kind = described.claimed_type(envelope)
    if kind is None:
        return False
    try:
        described.open_described(envelope, kind, digest, trusted, where="")
    except NotVerified:
        return False
    return True


def write(path: Path, tested: Tested) -> None:
    record = {"schema": SCHEMA, "repository": tested.repository, "digest": tested.digest, "index": tested.index,
              "platform": tested.platform, "attestations": list(tested.envelopes)}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _refused(archive: Path, what: str) -> NotVerified:
    return NotVerified(f"{archive}: {what}", hint="the verdicts file is not the archive's; copy the two files "
                                                  "`nox -s export` wrote, together")


def read(archive: Path) -> Tested:
    """The verdicts carried with `archive`, for the manifest the archive holds (NotVerified when the verdicts
    file speaks of another, or the archive could load other bytes than that manifest's)."""
    if not archive.exists():
        msg = f"there is no archive {archive}"
        raise CannotCheck(msg, hint="give the path of the .oci.tar `nox -s export` wrote: oci-archive:PATH")
    try:
        if sidecar(archive).exists() and not sidecar(archive).is_file():   # a pipe would block the read
            msg = f"{sidecar(archive).name} is not a file"
            raise OSError(msg)
        record = strictjson.loads(sidecar(archive).read_bytes(), fields=FIELDS | dsse.FIELDS)
    except FileNotFoundError:
        msg = f"{archive} carries no signed verdict: {sidecar(archive).name} is not beside it"
        raise NotVerified(msg, hint=f"copy {sidecar(archive).name} with the archive (export writes it for an "
                                    "image whose verdicts are attached in its registry)") from None
    except (OSError, ValueError) as exc:
        msg = f"cannot read {sidecar(archive)}: {exc}"
        raise CannotCheck(msg, hint="copy it again from where the archive was exported") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise _refused(archive, f"{sidecar(archive).name} is not a {SCHEMA} record (an older export's: export "
                                "the image again)")
    layout = ociarchive.read(archive)
    if record.get("digest") != layout.digest:
        raise _refused(archive, f"{sidecar(archive).name} speaks of {record.get('digest')}, but the archive holds "
                                f"the manifest {layout.digest}")
    if record.get("platform") not in (None, layout.platform):
        raise _refused(archive, f"{sidecar(archive).name} speaks of {record.get('platform')}, but the archive "
                                f"holds a {layout.platform} image")
    index, envelopes = record.get("index"), record.get("attestations")
    return Tested(str(record.get("repository")), layout.digest, index if isinstance(index, str) else None,
                  layout.platform, tuple(envelopes if isinstance(envelopes, list) else []))
