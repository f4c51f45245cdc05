"""An image as the engine saves it, read as a stream: its config, its layers' members in order, the merged view.

`docker save` writes a tar (Docker 20.10: `LAYERID/layer.tar`, the config and manifest.json; Docker 25 and later
also an OCI layout, `blobs/sha256/HEX`, layers possibly compressed). It is read once, front to back, as the SDK
hands it over: each layer's members are hashed as they pass, so an image of many gigabytes needs no copy on
disk and little memory. manifest.json (written last) then says which blob is which layer, in which order.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

CHUNK = 1 << 20
SMALL = 4 << 20          # a blob up to this size may be a manifest or config (JSON), kept to be parsed
PYC_HEADER = 16          # magic, flags, then the source's mtime and size, or its hash (PEP 552)
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class Entry:
    """One member of a layer: what a container sees at `path`."""

    path: str
    kind: str                 # file, dir, symlink, hardlink, char, block, fifo
    mode: int
    uid: int
    gid: int
    mtime: int
    size: int = 0
    sha256: str = ""          # of the content (files)
    link: str = ""            # the target (links)
    body_sha256: str = ""     # of a .pyc's code after its 16-byte header

    def same_content(self, other: Entry) -> bool:
        return (self.kind, self.size, self.sha256, self.link) == (other.kind, other.size, other.sha256, other.link)


@dataclass
class Image:
    """A saved image: its config and, per layer (bottom first), its members in the order of the layer's tar."""

    ref: str
    config: dict[str, Any] = field(default_factory=dict)
    layers: list[list[Entry]] = field(default_factory=list)

    def files(self) -> dict[str, Entry]:
        """The file system a container sees: the layers applied bottom first, whiteouts removing what is below."""
        view: dict[str, Entry] = {}
        for members in self.layers:
            for entry in members:
                folder, name = posixpath.split(entry.path)
                if name == OPAQUE:
                    prefix = f"{folder}/" if folder else ""
                    for path in [p for p in view if p.startswith(prefix)]:
                        del view[path]
                elif name.startswith(WHITEOUT):
                    gone = posixpath.join(folder, name.removeprefix(WHITEOUT))
                    for path in [p for p in view if p == gone or p.startswith(gone + "/")]:
                        del view[path]
                else:
                    view[entry.path] = entry
        return view


KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink",
         tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char", tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}


def normalised(name: str) -> str:
    path = posixpath.normpath("/" + name).lstrip("/")
    return path or "."


def _entry(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Entry:
    kind = KINDS.get(member.type, "other")
    digest, body, size = "", "", 0
    if kind == "file":
        handle = tar.extractfile(member)
        assert handle is not None
        whole, code = hashlib.sha256(), hashlib.sha256()
        while chunk := handle.read(CHUNK):
            whole.update(chunk)
            code.update(chunk[max(PYC_HEADER - size, 0):])
            size += len(chunk)
        digest = whole.hexdigest()
        body = code.hexdigest() if member.name.endswith(".pyc") else ""
        size = member.size
    link = member.linkname if kind in ("symlink", "hardlink") else ""
    if kind == "hardlink":
        link = normalised(link)
    return Entry(normalised(member.name), kind, member.mode & 0o7777, member.uid, member.gid, int(member.mtime),
                 size, digest, link, body)


def read_layer(stream: IO[bytes]) -> list[Entry]:
    """The members of one layer (a tar, uncompressed or gzip-, bzip2- or xz-compressed), in order."""
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        return [_entry(tar, member) for member in tar]


class _ChunkStream(io.RawIOBase):
    """The SDK's chunks of `docker save` as a file to read from."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


def read_saved(ref: str, chunks: Iterable[bytes]) -> Image:
    """The image `ref` from the chunks of its `docker save` archive."""
    small: dict[str, bytes] = {}
    layers: dict[str, list[Entry]] = {}
    stream = io.BufferedReader(_ChunkStream(chunks), CHUNK)
    with tarfile.open(fileobj=stream, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            name = normalised(member.name)
            handle = outer.extractfile(member)
            assert handle is not None
            if member.size <= SMALL:
                data = handle.read()
                small[name] = data
                if not _is_json(data):
                    with contextlib.suppress(tarfile.ReadError):   # a small file of no layer (Docker's VERSION)
                        layers[name] = read_layer(io.BytesIO(data))
            else:
                layers[name] = read_layer(handle)
    return _assemble(ref, small, layers)


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _assemble(ref: str, small: dict[str, bytes], layers: dict[str, list[Entry]]) -> Image:
    manifest = json.loads(small.get("manifest.json", b"[]"))
    if not isinstance(manifest, list) or len(manifest) != 1:
        msg = f"the saved archive of {ref} holds {len(manifest) if isinstance(manifest, list) else 0} images, not one"
        raise ValueError(msg)
    (entry,) = manifest
    config = json.loads(small[normalised(entry["Config"])])
    return Image(ref, config, [layers[normalised(path)] for path in entry["Layers"]])
