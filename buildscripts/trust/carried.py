"""Signed verdicts carried with an OCI archive, and the proof that the archive holds the image they name.

Beside the archive, not in it: NAME.oci.tar.verdicts.json holds the tested digest, the registry's manifest
and config for it (the bytes whose sha256 are that digest and the config digest), and the attached envelopes.
Beside, because the archive must stay the one-manifest layout that `pct create` and LXC's oci template take:
an OCI layout could list the verdicts as referrers in index.json, but no tool on the way to a container
(skopeo 1.9's oci-archive, LXC's template, Proxmox) carries referrers on, and a second manifest there is
one a tool that takes the first or the only one may pick. The archive's .sha256 file lists both files.

The archive's own manifest is not the tested one (an OCI manifest written from the registry's, with the
cell's annotations), so its digest is not what was signed. What is checked instead, link by link: the
carried manifest hashes to the signed digest; the config it names is the carried config; the archive's
layers are that manifest's layers, blob for blob (each blob's sha256 read again); and the archive's config
runs what the tested config runs (the same layers' diff_ids, Env, Entrypoint, Cmd, User, WorkingDir, ...).
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

from ..errors import CannotCheck, NotVerified
from .remote import digest_of

SUFFIX = ".verdicts.json"
SCHEMA = "sglang-images/carried-verdicts/v1"
# What a runtime takes from an image config (OCI image-spec config.md): the rest is history and comments.
RUNTIME_FIELDS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                  "StopSignal")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Carried:
    repository: str
    digest: str                      # the tested manifest digest
    envelopes: tuple[Any, ...]


def sidecar(archive: Path) -> Path:
    return archive.with_name(archive.name + SUFFIX)


def write(path: Path, *, repository: str, manifest: bytes, config: bytes, envelopes: Sequence[Any]) -> None:
    record = {"schema": SCHEMA, "repository": repository, "digest": digest_of(manifest),
              "manifest": base64.b64encode(manifest).decode(), "config": base64.b64encode(config).decode(),
              "attestations": list(envelopes)}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _refused(archive: Path, what: str) -> NotVerified:
    return NotVerified(f"{archive}: {what}", hint="the archive is not the image its verdicts name; export it "
                                                  "again from the registry (`nox -s export`)")


def read(archive: Path) -> Carried:
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
    try:
        manifest = base64.b64decode(str(record.get("manifest")), validate=True)
        config = base64.b64decode(str(record.get("config")), validate=True)
    except (binascii.Error, ValueError):
        raise _refused(archive, "the carried manifest or config is not base64") from None
    digest = str(record.get("digest"))
    if digest_of(manifest) != digest:
        raise _refused(archive, f"the carried manifest is not {digest} (it hashes to {digest_of(manifest)})")
    tested = _json(manifest, archive, "the carried manifest")
    if digest_of(config) != (tested.get("config") or {}).get("digest"):
        raise _refused(archive, "the carried config is not the one the tested manifest names")
    _same_image(archive, tested, _json(config, archive, "the carried config"))
    envelopes = record.get("attestations")
    return Carried(str(record.get("repository")), digest, tuple(envelopes if isinstance(envelopes, list) else []))


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
            index = json.loads(_member(tar, "index.json", archive))
            entries = index.get("manifests") or []
            if len(entries) != 1:
                raise _refused(archive, f"index.json lists {len(entries)} manifests, not the one image")
            own = json.loads(_member(tar, _blob_name(entries[0]["digest"]), archive))
            own_config = json.loads(_member(tar, _blob_name(own["config"]["digest"]), archive))
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError) as exc:
        msg = f"cannot read the archive {archive}: {exc}"
        raise CannotCheck(msg, hint="pass the .oci.tar that `nox -s export` wrote (sha256sum -c its .sha256)") from None
    layers = [layer.get("digest") for layer in own.get("layers") or []]
    wanted = [layer.get("digest") for layer in tested.get("layers") or []]
    if layers != wanted:
        raise _refused(archive, f"its layers are not the tested image's ({len(layers)} vs {len(wanted)}, "
                                "or other blobs)")
    missing = [d for d in [*layers, own["config"]["digest"]] if d not in blobs]
    if missing:
        raise _refused(archive, f"blob {missing[0]} is missing")
    changed = [k for k in ("architecture", "os", "variant", "rootfs") if _norm(own_config.get(k)) !=
               _norm(tested_config.get(k))]
    ours, theirs = own_config.get("config") or {}, tested_config.get("config") or {}
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
        assert handle is not None   # a regular file member always has content
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
        if digest.hexdigest() != parts[2]:
            raise _refused(archive, f"blob {parts[2][:12]}… holds other bytes than its name says")
        found.add(f"sha256:{parts[2]}")
    return found
