"""Signed verdicts carried with an OCI archive, and the proof that the archive holds the image they name.

Beside the archive, not in it: NAME.oci.tar.verdicts.json holds the tested digest, the registry's manifest
for it (and, when that is an index, the platform's manifest the archive was made from) and config, and the
attached envelopes that a trusted key signed for that digest. Beside, because the archive must stay the
one-manifest layout that `pct create` and LXC's oci template take: an OCI layout could list the verdicts as
referrers in index.json, but no tool on the way to a container (skopeo 1.9's oci-archive, LXC's template,
Proxmox) carries referrers on, and a second manifest there is one that a tool taking the first or only one
may pick. The archive's .sha256 file lists both files.

The archive's own manifest is not the tested one (an OCI manifest written from the registry's, with the
cell's annotations), so its digest is not what was signed. What is checked instead, link by link: the
carried manifest hashes to the signed digest (an index names the carried platform manifest); the config it
names is the carried config; the archive's layers are that manifest's layers, blob for blob (each blob's
sha256 read again); and the archive's config runs what the tested config runs (the same layers' diff_ids,
Env, Entrypoint, Cmd, User, WorkingDir, ...).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import distribution
from ..errors import CannotCheck, NotVerified
from . import cosign, verdicts
from .keys import PublicKey

SUFFIX = ".verdicts.json"
SCHEMA = "sglang-images/carried-verdicts/v1"
# What a runtime takes from an image config (OCI image-spec config.md): the rest is history and comments.
RUNTIME_FIELDS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                  "StopSignal")
IMAGE_FIELDS = ("architecture", "os", "variant", "rootfs")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Tested:
    """One tested digest, the bytes that show which image it is, and its verdicts: what export takes from the
    registry and writes beside the archive, and what `read` finds there."""

    repository: str
    digest: str                      # the tested digest (a manifest, or an index)
    manifest: bytes
    platform_manifest: bytes | None  # the index's manifest of the exported platform, when `digest` is an index
    config: bytes
    envelopes: tuple[Any, ...]

    @property
    def source(self) -> str:
        """What skopeo copies from: the platform's manifest itself (an index would be copied whole)."""
        own = self.platform_manifest or self.manifest
        return f"{self.repository}@{digest_of(own)}"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sidecar(archive: Path) -> Path:
    return archive.with_name(archive.name + SUFFIX)


def gather(ref: str, trusted: Sequence[PublicKey], env: Mapping[str, str], *,
           platform: tuple[str, str] = ("linux", "amd64")) -> Tested | None:
    """The tested image `ref` (REPO@sha256:…) with its verdicts, when a trusted key signed one for that digest
    (None when none did: there is nothing to carry)."""
    repository, digest = verdicts.split_digest_ref(ref)
    good = tuple(e for e in cosign.download(ref) if _counts(e, digest, trusted))
    if not good:
        return None
    manifest = distribution.raw(ref, env)
    located = distribution.locate(ref, env, platform=platform)
    own = distribution.raw(f"{repository}@{located.platform_digest}", env) if located.platform_digest else None
    config = distribution.raw(f"{repository}@{located.platform_digest or digest}", env, config=True)
    return Tested(repository, digest, manifest, own, config, good)


def _counts(envelope: Any, digest: str, trusted: Sequence[PublicKey]) -> bool:
    try:
        return digest in verdicts.open_verdict(envelope, trusted).digests
    except NotVerified:
        return False


def write(path: Path, tested: Tested) -> None:
    record = {"schema": SCHEMA, "repository": tested.repository, "digest": tested.digest,
              "manifest": base64.b64encode(tested.manifest).decode(),
              "platform_manifest": base64.b64encode(tested.platform_manifest).decode()
              if tested.platform_manifest else None,
              "config": base64.b64encode(tested.config).decode(), "attestations": list(tested.envelopes)}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _refused(archive: Path, what: str) -> NotVerified:
    return NotVerified(f"{archive}: {what}", hint="the archive is not the image its verdicts name; export it "
                                                  "again from the registry (`nox -s export`)")


def read(archive: Path) -> Tested:
    """The verdicts carried with `archive`, once the archive is shown to hold the image they name."""
    try:
        record = json.loads(sidecar(archive).read_text(encoding="utf-8"))
    except FileNotFoundError:
        msg = f"{archive} carries no signed verdict: {sidecar(archive).name} is not beside it"
        raise NotVerified(msg, hint=f"copy {sidecar(archive).name} with the archive (export writes it for an "
                                    "image whose verdicts are attached in its registry)") from None
    except (OSError, ValueError) as exc:
        msg = f"cannot read {sidecar(archive)}: {exc}"
        raise CannotCheck(msg, hint="copy it again from where the archive was exported") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise _refused(archive, f"{sidecar(archive).name} is not a {SCHEMA} record")
    digest = str(record.get("digest"))
    manifest = _bytes(record.get("manifest"), archive)
    if digest_of(manifest) != digest:
        raise _refused(archive, f"the carried manifest is not {digest} (it hashes to {digest_of(manifest)})")
    tested = _json(manifest, archive, "the carried manifest")
    own = None
    if "manifests" in tested:   # an index: the platform manifest it lists is the image
        own = _bytes(record.get("platform_manifest"), archive)
        if digest_of(own) not in [str(m.get("digest")) for m in tested["manifests"] if isinstance(m, dict)]:
            raise _refused(archive, f"the carried platform manifest is not one that {digest} lists")
        tested = _json(own, archive, "the carried platform manifest")
    config = _bytes(record.get("config"), archive)
    if digest_of(config) != (tested.get("config") or {}).get("digest"):
        raise _refused(archive, "the carried config is not the one the tested manifest names")
    _same_image(archive, tested, _json(config, archive, "the carried config"))
    envelopes = record.get("attestations")
    return Tested(str(record.get("repository")), digest, manifest, own, config,
                  tuple(envelopes if isinstance(envelopes, list) else []))


def _bytes(value: Any, archive: Path) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise _refused(archive, "a carried manifest or config is not base64") from None


def _json(data: bytes, archive: Path, what: str) -> dict[str, Any]:
    try:
        found = json.loads(data)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise _refused(archive, f"{what} is not a JSON object")
    return found


def _same_image(archive: Path, tested: Mapping[str, Any], tested_config: Mapping[str, Any]) -> None:
    """The archive's image is `tested`'s layers, with a config that runs what `tested_config` runs."""
    try:
        with tarfile.open(archive, "r:") as tar:
            blobs = _verified_blobs(tar, archive)
            entries = json.loads(_member(tar, "index.json", archive)).get("manifests") or []
            if len(entries) != 1:
                raise _refused(archive, f"index.json lists {len(entries)} manifests, not the one image")
            own = json.loads(_member(tar, _blob_name(entries[0]["digest"]), archive))
            own_config = json.loads(_member(tar, _blob_name(own["config"]["digest"]), archive))
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError) as exc:
        msg = f"cannot read the archive {archive}: {exc}"
        raise CannotCheck(msg, hint="pass the .oci.tar that `nox -s export` wrote (sha256sum -c its .sha256)") from None
    layers = [layer.get("digest") for layer in own.get("layers") or []]
    if layers != [layer.get("digest") for layer in tested.get("layers") or []]:
        raise _refused(archive, "its layers are not the tested image's")
    missing = [d for d in [*layers, own["config"]["digest"], entries[0]["digest"]] if d not in blobs]
    if missing:
        raise _refused(archive, f"blob {missing[0]} is missing")
    ours, theirs = own_config.get("config") or {}, tested_config.get("config") or {}
    changed = [k for k in IMAGE_FIELDS if _norm(own_config.get(k)) != _norm(tested_config.get(k))]
    changed += [k for k in RUNTIME_FIELDS if _norm(ours.get(k)) != _norm(theirs.get(k))]
    if changed:
        raise _refused(archive, f"its config differs from the tested one in {', '.join(changed)}")


def _norm(value: Any) -> Any:
    """An absent, null or empty value are the same to a runtime."""
    return None if value in (None, "", [], {}) else value


def _blob_name(digest: str) -> str:
    algorithm, _, hexdigest = str(digest).partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _member(tar: tarfile.TarFile, name: str, archive: Path) -> bytes:
    handle = tar.extractfile(name)
    if handle is None:
        raise _refused(archive, f"{name} is not a file in the archive")
    return handle.read()


def _verified_blobs(tar: tarfile.TarFile, archive: Path) -> set[str]:
    """The digests of the archive's blobs, each read and hashed: a blob whose bytes are not its name fails."""
    found = set()
    for member in tar:
        parts = member.name.split("/")
        if not (member.isfile() and len(parts) == 3 and parts[:2] == ["blobs", "sha256"]):
            continue
        digest = hashlib.sha256()
        handle = tar.extractfile(member)
        if handle is None:
            continue
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
        if digest.hexdigest() != parts[2]:
            raise _refused(archive, f"blob {parts[2][:12]}… holds other bytes than its name says")
        found.add(f"sha256:{parts[2]}")
    return found
