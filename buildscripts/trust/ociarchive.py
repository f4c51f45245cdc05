"""An OCI archive read as the tools that load it read it, or refused.

skopeo and Docker (Go's archive/tar), LXC's oci template (skopeo, then umoci) and Proxmox unpack the tar and
take the layout's files by path. A tar can say two things at once where readers differ (which of two members
of one path counts, what a GNU or global header renames, what follows the end marker), so it is read
strictly, and refused unless every reader must see the same image:
- each member's headers are plain POSIX ustar, with at most one pax header of its own whose keys are only
  path, size, times and owners (no GNU long names, no global headers, no sparse files); the members follow
  one another with nothing between, and only zeros follow the last;
- each path, normalised ('./', '//', a trailing '/'), appears once and stays inside the layout: a second
  index.json, or a later member at a blob's path, is refused (tools disagree which one counts);
- oci-layout, index.json and blobs/sha256/HEX are regular files, blobs and blobs/sha256 folders; nothing
  else may be there (no links, devices or other files where a blob or index.json is expected);
- index.json names exactly one image manifest; the chain is followed by digest, never field by field:
  index.json -> manifest -> config and layers, each blob there with the size and sha256 its descriptor
  says. A blob the chain does not reach is refused: export writes none, and bytes that no descriptor
  reaches are bytes nobody checked, which a reader taking another route (a nested index, a file system
  that folds case) could still load.
What it yields is the manifest digest: the image the archive holds is that manifest, byte for byte, and a
verdict for that digest speaks of it.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .. import platform_reading, strictjson
from ..errors import CannotCheck, NotVerified

BLOCK = 512
CHUNK = 1 << 20
KEEP = 4 << 20                       # blobs up to this size are kept to be parsed (manifests, configs)
POSIX_MAGIC = b"ustar\x0000"         # POSIX ustar and pax; GNU's "ustar  \0" reads prefix fields otherwise
PAX_KEYS = frozenset({"path", "size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"})
FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
MANIFEST_TYPES = frozenset({"application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"})
BLOB = re.compile(r"blobs/sha256/([0-9a-f]{64})")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
FOLDERS = ("blobs", "blobs/sha256")
HINT = "use the archive `nox -s export` wrote, as it wrote it (`sha256sum -c NAME.oci.tar.sha256`)"


@dataclass(frozen=True)
class Layout:
    """The one image an archive holds, as every tool that loads it reads it."""

    path: Path
    digest: str                       # the manifest's sha256: what a verdict names
    media_type: str
    platform: str                     # os/architecture[/variant] of its config
    annotations: Mapping[str, str] = field(default_factory=dict)   # index.json's, on the descriptor


@dataclass
class _Member:
    kind: bytes
    size: int
    sha256: str | None = None
    data: bytes | None = None


def refused(archive: Path, what: str) -> NotVerified:
    return NotVerified(f"{archive}: {what}", hint=HINT)


def read(archive: Path) -> Layout:
    """The image `archive` holds; NotVerified naming what a tool could read otherwise, CannotCheck when it
    cannot be read at all."""
    if not archive.is_file():   # a folder, a device, a named pipe (which would block the read forever)
        msg = f"{archive} is not a file"
        raise CannotCheck(msg, hint=HINT)
    try:
        with archive.open("rb") as fh:
            members = _members(archive, fh)
    except (OSError, tarfile.TarError, EOFError, ValueError) as exc:
        msg = f"cannot read the archive {archive}: {exc}"
        raise CannotCheck(msg, hint=HINT) from None
    return _chain(archive, members)


def _name(archive: Path, raw: str) -> str:
    """The member's path as a reader resolves it inside the layout; refused when it leaves the layout."""
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in raw):
        raise refused(archive, f"member {raw!r} has a control character in its name")
    name = posixpath.normpath(raw) if raw else ""
    if not raw or raw.startswith("/") or name == ".." or name.startswith("../"):
        raise refused(archive, f"member {raw!r} is outside the layout")
    return name


def _headers(archive: Path, fh: IO[bytes], member: tarfile.TarInfo) -> None:
    """The raw headers of `member`: POSIX ustar, at most one pax header of its own, with known keys only."""
    at = member.offset
    fh.seek(at)
    block = fh.read(BLOCK)
    if block[156:157] == tarfile.XHDTYPE:
        if block[257:265] != POSIX_MAGIC:
            raise refused(archive, f"member {member.name!r} has a pax header that is not POSIX ustar")
        at += BLOCK + -(-_octal(block[124:136]) // BLOCK) * BLOCK
        fh.seek(at)
        block = fh.read(BLOCK)
    if at + BLOCK != member.offset_data:
        raise refused(archive, f"member {member.name!r} has GNU or global headers, which tools read differently")
    if block[257:265] != POSIX_MAGIC:
        raise refused(archive, f"member {member.name!r} is not a POSIX ustar header (GNU tar's reads otherwise)")
    odd = sorted(set(member.pax_headers) - PAX_KEYS)
    if odd:
        raise refused(archive, f"member {member.name!r} has pax keys tools read differently: {', '.join(odd)}")


def _octal(field_: bytes) -> int:
    text = field_.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _members(archive: Path, fh: IO[bytes]) -> dict[str, _Member]:
    found: dict[str, _Member] = {}
    end = 0
    tar = tarfile.open(fileobj=fh, mode="r:")   # noqa: SIM115 (the file is closed by the caller)
    while (member := tar.next()) is not None:
        if member.offset != end:
            raise refused(archive, f"{member.offset - end} bytes before member {member.name!r} belong to no member")
        where = fh.tell()
        _headers(archive, fh, member)
        fh.seek(where)
        name = _name(archive, member.name)
        if name in found:
            raise refused(archive, f"{name} is in the archive twice: tools disagree which one they load")
        found[name] = _Member(member.type, member.size)
        if name == ".":
            if member.type != tarfile.DIRTYPE:
                raise refused(archive, "member '.' is not a folder")
        elif name in FOLDERS:
            if member.type != tarfile.DIRTYPE:
                raise refused(archive, f"{name} is not a folder")
        elif name in ("oci-layout", "index.json") or BLOB.fullmatch(name):
            if member.type not in FILE_TYPES:
                raise refused(archive, f"{name} is a link or device, not a file")
            found[name] = _read(archive, tar, member)
        else:
            raise refused(archive, f"{name} is no part of an OCI layout")
        end = member.offset_data + -(-member.size // BLOCK) * BLOCK
    fh.seek(end)
    while chunk := fh.read(CHUNK):
        if chunk.strip(b"\0"):
            raise refused(archive, "bytes follow the end of the archive: some tools read on past it")
    return found


def _read(archive: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> _Member:
    handle = tar.extractfile(member)
    if handle is None:
        raise refused(archive, f"{member.name} is not a file")
    digest, kept, size = hashlib.sha256(), bytearray(), 0
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if size <= KEEP:
            kept += chunk
    if size != member.size:
        msg = f"{archive}: {member.name} ends after {size} of its {member.size} bytes"
        raise CannotCheck(msg, hint=HINT)
    return _Member(member.type, size, digest.hexdigest(), bytes(kept) if size <= KEEP else None)


def _json(archive: Path, member: _Member | None, what: str) -> dict[str, Any]:
    """`member` as a JSON object, read as strictly as any image reader could read it (strictjson): Python
    would take NaN, the last of two keys and a key in another case where another reader fails or takes another."""
    try:
        return strictjson.loads_object(member.data if member is not None and member.data is not None else b"null")
    except strictjson.Ambiguous as exc:
        raise refused(archive, f"{what} is not a JSON object every reader reads alike (strict UTF-8 "
                                f"JSON, each key once, no key in another case: {exc})") from None


def _blob(archive: Path, members: Mapping[str, _Member], descriptor: Any, what: str) -> _Member:
    """The blob `descriptor` names, with the size and sha256 it says."""
    if not isinstance(descriptor, dict) or not DIGEST.fullmatch(str(descriptor.get("digest"))):
        raise refused(archive, f"{what}: no sha256 digest")
    if "data" in descriptor:
        raise refused(archive, f"{what} embeds data, which some tools take instead of the blob")
    hexdigest = str(descriptor["digest"]).removeprefix("sha256:")
    member = members.get(f"blobs/sha256/{hexdigest}")
    if member is None:
        raise refused(archive, f"{what}: blob {hexdigest[:12]}… is not in the archive")
    if member.sha256 != hexdigest:
        raise refused(archive, f"{what}: blob {hexdigest[:12]}… holds other bytes than its name says")
    size = descriptor.get("size")
    if type(size) is not int or size != member.size:   # not True, not 1.0: Go reads neither as a size
        raise refused(archive, f"{what}: blob {hexdigest[:12]}… is {member.size} bytes, not the "
                               f"{descriptor.get('size')} its descriptor says")
    return member


def _chain(archive: Path, members: Mapping[str, _Member]) -> Layout:
    layout = _json(archive, members.get("oci-layout"), "oci-layout")
    if layout.get("imageLayoutVersion") != "1.0.0":
        raise refused(archive, "oci-layout is not an OCI image layout 1.0.0")
    entries = _json(archive, members.get("index.json"), "index.json").get("manifests")
    if not isinstance(entries, list) or len(entries) != 1:
        count = len(entries) if isinstance(entries, list) else 0
        raise refused(archive, f"index.json lists {count} manifests, not the one image (tools choose differently)")
    (entry,) = entries
    media_type = str(entry.get("mediaType") if isinstance(entry, dict) else "")
    if media_type not in MANIFEST_TYPES:
        raise refused(archive, f"index.json names a {media_type or 'typeless'} entry, not an image manifest")
    manifest_blob = _blob(archive, members, entry, "index.json's manifest")
    manifest = _json(archive, manifest_blob, "the manifest")
    if "manifests" in manifest or manifest.get("mediaType", media_type) != media_type:
        raise refused(archive, "the manifest is not the image manifest index.json says it is")
    config = _json(archive, _blob(archive, members, manifest.get("config"), "the manifest's config"), "the config")
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise refused(archive, "the manifest lists no layers")
    for number, layer in enumerate(layers, 1):
        _blob(archive, members, layer, f"layer {number}")
    reached = {str(d.get("digest")).removeprefix("sha256:") for d in [entry, manifest["config"], *layers]}
    stray = sorted(m.group(1) for name in members if (m := BLOB.fullmatch(name)) and m.group(1) not in reached)
    if stray:
        raise refused(archive, f"blob {stray[0][:12]}… is reached by no descriptor: bytes nobody checked")
    platform = _platform(archive, entry, config)
    notes = entry.get("annotations")
    return Layout(archive, "sha256:" + str(manifest_blob.sha256), media_type, platform,
                  {str(k): str(v) for k, v in notes.items()} if isinstance(notes, dict) else {})


def _platform(archive: Path, entry: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """The platform the config names ("" for none), refused when readers of images could read it apart, or
    when index.json's entry names another (a loader that picks by the entry's label takes it for that one)."""
    try:
        platform = platform_reading.read(config, required=False) or ""
        label = platform_reading.of_entry(entry)
    except platform_reading.NotCanonical as exc:
        raise refused(archive, f"its platform is spelled so that readers of images read it apart: {exc}") from None
    normalised = platform_reading.normalised
    if label is not None and (not platform or normalised(label) != normalised(platform)):
        raise refused(archive, f"index.json lists its manifest as {label}, but its config is "
                               f"{f'a {platform} image' if platform else 'of no platform'}")
    return platform
