"""The baked kernel caches made the same in every build of the same inputs (bake.py runs this at its end).

Two cold builds of one cell gave other bytes in three kinds of file under the caches:
  - the objects and libraries nvcc built: nvcc names its temporary files tmpxft_<pid>_<counter>-..., and the
    host compiler writes the source's name, one of them, into each object's symbol table (a FILE symbol, read
    by nothing at run time). `steady` zeroes the process id there, in .strtab and nowhere else;
  - ninja's journal (.ninja_log: each output's start and end in milliseconds, its mtime, the command's hash)
    and its deps log (.ninja_deps: each output's mtime and the headers it read), both in the order the jobs
    happened to finish. When the build clamps file times to SOURCE_DATE_EPOCH (a stamped build), `clamp_log`
    and `clamp_deps` clamp the times recorded there the same way and write the records in a fixed order;
    otherwise every file keeps its build time anyway, and they are left as written.
Ninja still finds nothing to do at start: it rebuilds an output when its command's hash changed, when an input
is newer than it, when the recorded mtime is older than the newest input, or when the deps log is older than the
output; in an image whose times are clamped, none is true (inputs, outputs and records are all at the epoch).
Standard library only.
"""

from __future__ import annotations

import os
import re
import struct
from typing import Dict, List, Optional, Tuple

TMPXFT = re.compile(rb"tmpxft_[0-9a-f]{8}_")
STEADY_TMPXFT = b"tmpxft_00000000_"
SHT_STRTAB = 3
DEPS_MAGIC = b"# ninjadeps\n"
DEPS_VERSION = 4
DEPS_RECORD = 0x80000000   # the high bit of a record's size: a deps record, else a path record


def symbol_names(data: bytes) -> Optional[Tuple[int, int]]:
    """Offset and size of the .strtab of an ELF64 little-endian file (every arch the images build), or None."""
    if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shnum or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        return None

    def header(i: int) -> Tuple[int, int, int, int]:
        name, kind, _, _, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, kind, offset, size

    names = header(shstrndx)[2]
    for i in range(shnum):
        name, kind, offset, size = header(i)
        if kind == SHT_STRTAB and data[names + name:names + name + 8] == b".strtab\0" and offset + size <= len(data):
            return offset, size
    return None


def _rewrite(path: str, data: bytes) -> None:
    """Write `data` over `path`, keeping its times: ninja compares them."""
    stat = os.stat(path)
    with open(path, "wb") as fh:
        fh.write(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def steady(path: str) -> bool:
    """Zero the process ids of nvcc's temporary names in `path`'s symbol names. True if it changed."""
    with open(path, "rb") as fh:
        data = fh.read()
    found = symbol_names(data)
    if found is None:
        return False
    offset, size = found
    names = TMPXFT.sub(STEADY_TMPXFT, data[offset:offset + size])
    if names == data[offset:offset + size]:
        return False
    _rewrite(path, data[:offset] + names + data[offset + size:])
    return True


def clamp_log(text: str, epoch_ns: int) -> str:
    """A .ninja_log (v5 or later: start, end, mtime, output, hash) with no time of the build: each output's
    last entry, its start and end 0, its mtime clamped to `epoch_ns`, in the order of the outputs' names."""
    lines = text.splitlines()
    if not lines or not re.fullmatch(r"# ninja log v([5-9]|\d\d+)", lines[0]):
        raise ValueError(f"not a ninja log of version 5 or later: {lines[:1]}")
    last: Dict[str, List[str]] = {}
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) != 5:
            raise ValueError(f"a ninja log line of {len(fields)} fields: {line!r}")
        last[fields[3]] = fields
    out = [lines[0]]
    for name in sorted(last):
        _, _, mtime, _, command_hash = last[name]
        out.append("\t".join(["0", "0", str(min(int(mtime), epoch_ns)), name, command_hash]))
    return "\n".join(out) + "\n"


def _deps_records(data: bytes) -> Tuple[List[bytes], Dict[int, Tuple[int, List[int]]]]:
    """The paths (by id) and the deps records (output id -> mtime, input ids; the last one kept) of a
    .ninja_deps of version 4."""
    if data[:len(DEPS_MAGIC)] != DEPS_MAGIC or struct.unpack_from("<i", data, len(DEPS_MAGIC))[0] != DEPS_VERSION:
        raise ValueError("not a ninja deps log of version 4")
    paths: List[bytes] = []
    deps: Dict[int, Tuple[int, List[int]]] = {}
    offset = len(DEPS_MAGIC) + 4
    while offset < len(data):
        head, = struct.unpack_from("<I", data[offset:offset + 4].ljust(4, b"\xff"))
        size = head & ~DEPS_RECORD
        body = data[offset + 4:offset + 4 + size]
        if len(body) != size or size % 4 or size < (12 if head & DEPS_RECORD else 4):
            raise ValueError(f"a truncated or malformed ninja deps record at byte {offset}")
        offset += 4 + size
        if head & DEPS_RECORD:
            out, low, high = struct.unpack_from("<iII", body)
            deps[out] = ((high << 32) | low, list(struct.unpack_from(f"<{(size - 12) // 4}i", body, 12)))
        else:
            checksum, = struct.unpack_from("<I", body, size - 4)
            if ~checksum & 0xFFFFFFFF != len(paths):
                raise ValueError(f"a ninja deps path record out of order at byte {offset - 4 - size}")
            paths.append(body[:size - 4].rstrip(b"\0"))
    return paths, deps


def clamp_deps(data: bytes, epoch_ns: int) -> bytes:
    """A .ninja_deps with no time of the build: each output's deps with its mtime clamped to `epoch_ns`, the
    outputs in the order of their names, every path written where it is first needed (as ninja does)."""
    paths, deps = _deps_records(data)
    ids: Dict[bytes, int] = {}
    out = [DEPS_MAGIC, struct.pack("<i", DEPS_VERSION)]

    def path_id(path: bytes) -> int:
        if path not in ids:
            ids[path] = len(ids)
            padded = path + b"\0" * (-len(path) % 4)
            out.append(struct.pack("<I", len(padded) + 4) + padded + struct.pack("<I", ~ids[path] & 0xFFFFFFFF))
        return ids[path]

    for output in sorted(deps, key=lambda i: paths[i]):
        mtime, inputs = deps[output]
        mine = path_id(paths[output])
        theirs = [path_id(paths[i]) for i in inputs]
        clamped = min(mtime, epoch_ns)
        out.append(struct.pack("<I", (12 + 4 * len(theirs)) | DEPS_RECORD) +
                   struct.pack(f"<iII{len(theirs)}i", mine, clamped & 0xFFFFFFFF, clamped >> 32, *theirs))
    return b"".join(out)


def make_repeatable(folders: List[str], epoch: Optional[str]) -> Dict[str, int]:
    """Everything above under `folders`; ninja's records only when `epoch` (SOURCE_DATE_EPOCH) is set. How many
    files of each kind it changed."""
    epoch_ns = int(epoch) * 10**9 if epoch else None
    changed = {"objects": 0, "ninja_logs": 0, "ninja_deps": 0}
    for folder in folders:
        for parent, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(parent, name)
                if name.endswith((".so", ".o")):
                    changed["objects"] += steady(path)
                elif epoch_ns is not None and name in (".ninja_log", ".ninja_deps"):
                    with open(path, "rb") as fh:
                        data = fh.read()
                    made = clamp_log(data.decode(), epoch_ns).encode() if name == ".ninja_log" \
                        else clamp_deps(data, epoch_ns)
                    if made != data:
                        _rewrite(path, made)
                        changed["ninja_logs" if name == ".ninja_log" else "ninja_deps"] += 1
    return changed
