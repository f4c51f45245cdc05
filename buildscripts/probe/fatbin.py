"""Which GPU code a shared library carries: ELF section headers -> `.nv_fatbin` -> fatbin entry headers.

Standard library only (runs inside the image under test, where cuobjdump is usually absent). Only
headers are read, with seeks: libtorch_cuda.so and sgl_kernel's flash_ops are hundreds of MB to GB,
and the payloads (often compressed) are never needed to know which archs are inside.

Fatbin layout (as written by nvcc's fatbinary; the same fields cuobjdump lists):
  header   u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries that follow
  entry    u16 kind (1 = PTX, 2 = ELF/cubin), u16 version, u32 header size, u64 payload size,
           u32 compressed size, u32 -, u16 minor, u16 major, u32 arch (e.g. 100), u32 name offset,
           u32 name length, u64 flags (0x100000: arch-specific "a", 0x200000: family "f",
           0x2000 / 0x8000: payload compressed)
"""

from __future__ import annotations

import os
import re
import struct
from typing import BinaryIO, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
FLAG_COMPRESSED = 0x2000 | 0x8000
_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
_SCAN_CHUNK = 1 << 16
SO_RE = re.compile(r"\.so(\.\d+)*$")
ARCH_RE = re.compile(r"^(?:sm|compute)_(\d{2,3})([af]?)$")


class Entry(NamedTuple):
    kind: str         # "sass", "ptx" (or "kind-0x10" for an entry kind this reader does not know)
    arch: int         # e.g. 90, 100, 120
    variant: str      # "", "a" (arch-specific) or "f" (family)
    compressed: bool
    ptx_version: str  # "9.0" for PTX entries, "" for SASS

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.arch}{self.variant}"


class NotElf(Exception):
    """The file is not a 64-bit little-endian ELF object."""


class SectionHeader(NamedTuple):
    number: int                # its index in the section header table
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int


def section_headers(fh: BinaryIO) -> List[SectionHeader]:
    """Every section header of an ELF file, read with seeks from its section header table only."""
    fh.seek(0)
    ident = fh.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        msg = "not a 64-bit little-endian ELF file"
        raise NotElf(msg)
    shoff, = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shentsize < 64:
        return []
    fh.seek(shoff)
    first = fh.read(shentsize)
    if shnum == 0 and len(first) >= 64:       # more than 0xff00 sections: the count lives in entry 0
        shnum = struct.unpack_from("<Q", first, 0x20)[0]
    if shstrndx == 0xFFFF and len(first) >= 64:
        shstrndx = struct.unpack_from("<I", first, 0x28)[0]
    fh.seek(shoff)
    table = fh.read(shentsize * shnum)
    raw = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(len(table) // shentsize)]
    if not 0 <= shstrndx < len(raw):
        return []
    fh.seek(raw[shstrndx][4])
    strtab = fh.read(raw[shstrndx][5])
    out = []
    for i, (name_off, stype, flags, addr, offset, size) in enumerate(raw):
        end = strtab.find(b"\0", name_off)
        out.append(SectionHeader(i, strtab[name_off:end].decode("ascii", "replace"), stype, flags, addr, offset,
                                 size))
    return out


def sections(fh: BinaryIO) -> Dict[str, Tuple[int, int]]:
    """Section name -> (file offset, size), from the section header table only."""
    return {h.name: (h.offset, h.size) for h in section_headers(fh)}


def entry_of(header: bytes) -> Entry:
    """The Entry an entry header (at least 48 bytes) describes."""
    kind, = struct.unpack_from("<H", header, 0)
    minor, major, arch = struct.unpack_from("<HHI", header, 24)
    flags, = struct.unpack_from("<Q", header, 40)
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    name = {KIND_PTX: "ptx", KIND_ELF: "sass"}.get(kind, f"kind-{kind:#x}")
    return Entry(name, arch, variant, bool(flags & FLAG_COMPRESSED), f"{major}.{minor}" if kind == KIND_PTX else "")


class NotTiled(Exception):
    """The section is not a plain sequence of fatbins (what `fatbins` needs to rewrite or load them)."""


class Fatbin(NamedTuple):
    offset: int                          # within the section
    head: bytes                          # the 16-byte fatbin header
    entries: List[Tuple[Entry, bytes]]   # each entry and its raw bytes (header and payload)

    def original(self) -> bytes:
        return self.head + b"".join(raw for _e, raw in self.entries)


def fatbins(data: bytes, offset: int, size: int) -> List[Fatbin]:
    """The fatbins of a section held in `data`, which must tile it (zero bytes between them at most).

    Stricter than `_entries`: the pruner rewrites these bytes and the GPU check hands them to the
    driver, so an entry of unknown shape is an error rather than the end of a walk.
    """
    out: List[Fatbin] = []
    pos = 0
    while pos + 16 <= size:
        head = bytes(data[offset + pos:offset + pos + 16])
        magic, _version, hsize, fat_size = struct.unpack("<IHHQ", head)
        if magic != FATBIN_MAGIC:
            rest = data[offset + pos:offset + size]
            skip = len(rest) - len(rest.lstrip(b"\0"))
            if skip == len(rest):
                break
            if skip == 0 or skip % 8:
                msg = f"no fatbin header at section offset {pos + skip:#x}"
                raise NotTiled(msg)
            pos += skip
            continue
        if hsize != 16 or pos + 16 + fat_size > size:
            msg = f"fatbin at section offset {pos:#x} has a header of {hsize} bytes or runs past the end"
            raise NotTiled(msg)
        box = Fatbin(pos, head, [])
        at, stop = pos + 16, pos + 16 + fat_size
        while at < stop:
            _kind, _v, ehsize, payload = struct.unpack_from("<HHIQ", data, offset + at)
            if ehsize < 64 or ehsize % 8 or at + ehsize + payload > stop:
                msg = f"malformed fatbin entry at section offset {at:#x}"
                raise NotTiled(msg)
            raw = bytes(data[offset + at:offset + at + ehsize + payload])
            box.entries.append((entry_of(raw), raw))
            at += ehsize + payload
        out.append(box)
        pos = stop
    return out


def _entries(fh: BinaryIO, offset: int, size: int) -> Iterator[Entry]:
    """Walk the fatbins packed into one section; padding between them is skipped by searching the magic."""
    pos, end = offset, offset + size
    while pos + 16 <= end:
        fh.seek(pos)
        head = fh.read(16)
        magic, _version, hsize, fat_size = struct.unpack("<IHHQ", head)
        if magic != FATBIN_MAGIC:
            found = _find_magic(fh, pos, end)
            if found is None:
                return
            pos = found
            continue
        entry, stop = pos + hsize, min(pos + hsize + fat_size, end)
        while entry + 48 <= stop:
            fh.seek(entry)
            raw = fh.read(64)
            kind, _v, ehsize, payload = struct.unpack_from("<HHIQ", raw, 0)
            if kind not in (KIND_PTX, KIND_ELF) or ehsize < 48 or payload > size:
                break  # not an entry header: a corrupt or unknown layout; stop this fatbin
            yield entry_of(raw)
            entry += ehsize + payload
        pos = max(stop, pos + 16)


def _find_magic(fh: BinaryIO, pos: int, end: int) -> Optional[int]:
    while pos < end:
        fh.seek(pos)
        chunk = fh.read(min(_SCAN_CHUNK, end - pos))
        if not chunk:
            return None
        at = chunk.find(_MAGIC_BYTES, 1)
        while at != -1 and (pos + at) % 8:   # fatbins are 8-byte aligned
            at = chunk.find(_MAGIC_BYTES, at + 1)
        if at != -1:
            return pos + at
        if len(chunk) < 4:
            return None
        pos += len(chunk) - 3
    return None


def read_file(path: str) -> List[Entry]:
    """Every fatbin entry of one ELF file (empty when it carries no GPU code). Raises NotElf/OSError."""
    found: List[Entry] = []
    with open(path, "rb") as fh:
        for name, (offset, size) in sections(fh).items():
            if name in FATBIN_SECTIONS and size:
                found.extend(_entries(fh, offset, size))
    return found


def shared_objects(root: str) -> List[str]:
    """The .so files under a package folder (symlinked duplicates counted once)."""
    seen, out = set(), []
    for folder, _dirs, files in os.walk(root):
        for f in sorted(files):
            if not SO_RE.search(f):
                continue
            path = os.path.join(folder, f)
            real = os.path.realpath(path)
            if real not in seen and os.path.isfile(real):
                seen.add(real)
                out.append(path)
    return out


def parse_arch(target: str) -> Tuple[int, str]:
    m = ARCH_RE.match(target)
    if not m:
        msg = f"not a GPU arch: {target!r} (write sm_90a, sm_100a, ...)"
        raise ValueError(msg)
    return int(m.group(1)), m.group(2)


def runs_on_any(entry: Entry, targets: Iterable[str]) -> bool:
    return any(runs_on(entry, t) for t in targets)


def runs_on(entry: Entry, target: str) -> bool:
    """Whether `entry` can run on a GPU of `target`, by CUDA's compatibility rules.

    SASS runs on the same major at an equal or newer minor ("a" only on exactly its arch);
    PTX JIT-compiles forward to any newer arch ("a" only to its own arch, "f" within its family).
    """
    number, _suffix = parse_arch(target)
    if entry.variant == "a":
        return entry.arch == number
    if entry.kind == "sass" or entry.variant == "f":
        return entry.arch // 10 == number // 10 and entry.arch <= number
    return entry.arch <= number


def coverage(entries: Iterable[Entry], targets: Iterable[str]) -> Dict[str, Dict[str, object]]:
    """Per target arch: 'sass' (machine code present), 'ptx' (only PTX that can JIT to it) or 'missing'."""
    entries = list(entries)
    out: Dict[str, Dict[str, object]] = {}
    for target in targets:
        sass = sorted({e.name for e in entries if e.kind == "sass" and runs_on(e, target)})
        ptx = sorted({e.name for e in entries if e.kind == "ptx" and runs_on(e, target)})
        out[target] = {"status": "sass" if sass else "ptx" if ptx else "missing", "sass": sass, "ptx": ptx}
    return out
