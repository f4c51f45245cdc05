"""Rewrite one shared library without the GPU machine code no target arch can run (used by prune_fatbins.py).

A CUDA library carries one cubin (SASS) per GPU arch it was built for in its `.nv_fatbin` section. A cubin runs
only on its own major arch at an equal or newer minor (`fatbin.runs_on`), so in an image whose cells target
sm_90a/sm_100a/sm_120a a cubin for sm_80 or sm_103 can never load. Those entries go; PTX always stays (the driver
can compile it forward), and so does every cubin that runs on some target.

How a library is rewritten, keeping every virtual address:
1. Each fatbin in `.nv_fatbin` is rebuilt without the dropped entries (the kept entry bytes are
   copied verbatim) and the fatbins are packed at the start of the section.
2. The runtime finds a fatbin through its wrapper in `.nvFatBinSegment` (nvcc's `__fatbinwrap`,
   registered by `__cudaRegisterFatBinary`), whose data pointer is an R_X86_64_RELATIVE
   relocation: its addend (and the in-place value) move to the packed position. A fatbin that no
   wrapper reaches, or whose start code addresses itself (a RIP-relative `lea`/`mov`, found by a
   byte scan), cannot be moved: it is pruned where it stands, and what follows is packed after it.
3. The freed tail of the section, rounded down to whole pages, is cut out of the file. The load
   segment that held the section is split in two: the part up to the section's new end, and the
   sections after it (`.eh_frame` and others) at their old addresses but an earlier file offset.
   The second segment takes the program header slot of PT_NOTE (the notes stay in the file; the
   loader never reads them for a shared library). Every later file offset moves by the same number
   of pages, so offset and address stay congruent modulo the page size.

A library whose layout does not fit exactly (fatbins that do not tile the section, a relocated
pointer into the section from anywhere but a wrapper, no PT_NOTE slot) raises Unsupported and is left
as it is. `check` parses a rewritten file again and compares it with the plan before it may replace
the original.

Standard library only: it runs inside the image build, from /opt/images beside the probe's fatbin reader
(fatbin.py), which prune_fatbins.py puts on the import path in the project.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
from dataclasses import dataclass

import fatbin

PAGE = 4096
WRAPPER_MAGIC = 0x466243B1
WRAPPER_SIZE = 24
PT_LOAD, PT_NOTE = 1, 4
SHT_RELA, SHT_DYNSYM, SHT_RELR = 4, 11, 19
SHF_EXECINSTR = 0x4
R_X86_64_RELATIVE = 8
# `lea`/`mov` with a RIP-relative operand: opcode 8D or 8B, then a ModRM byte with mod=00, r/m=101.
RIP_RELATIVE = re.compile(rb"[\x8b\x8d][\x05\x0d\x15\x1d\x25\x2d\x35\x3d]")
SECTION = ".nv_fatbin"


class Unsupported(Exception):
    """The library's layout is not one this pruner rewrites; it is kept unchanged."""


@dataclass
class Segment:
    index: int
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


def droppable(entry: fatbin.Entry, targets: list[str]) -> bool:
    """Machine code that runs on no target arch; PTX and entry kinds unknown here always stay."""
    return entry.kind == "sass" and not fatbin.runs_on_any(entry, targets)


def without_dropped(box: fatbin.Fatbin, targets: list[str]) -> bytes:
    """The fatbin without its droppable entries; kept entries are copied byte for byte."""
    magic, version, hsize, _size = struct.unpack("<IHHQ", box.head)
    body = b"".join(raw for entry, raw in box.entries if not droppable(entry, targets))
    return struct.pack("<IHHQ", magic, version, hsize, len(body)) + body


class Elf:
    def __init__(self, data: bytes | bytearray) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise Unsupported("not a 64-bit little-endian ELF file")
        self.data = data
        (self.phoff, self.shoff) = struct.unpack_from("<QQ", data, 0x20)
        self.phentsize, self.phnum, self.shentsize, self.shnum, self.shstrndx = \
            struct.unpack_from("<HHHHH", data, 0x36)
        if self.shnum == 0 or self.shstrndx >= self.shnum:
            raise Unsupported("extended section numbering")
        self.segments = [self._segment(i) for i in range(self.phnum)]
        self.sections = fatbin.section_headers(io.BytesIO(data))

    def _segment(self, i: int) -> Segment:
        ptype, flags, offset, vaddr, _paddr, filesz, memsz, align = \
            struct.unpack_from("<IIQQQQQQ", self.data, self.phoff + i * self.phentsize)
        return Segment(i, ptype, flags, offset, vaddr, filesz, memsz, align)

    def section(self, name: str) -> fatbin.SectionHeader | None:
        found = [s for s in self.sections if s.name == name]
        if len(found) > 1:
            raise Unsupported(f"{len(found)} sections named {name}")
        return found[0] if found else None

    def file_offset(self, vaddr: int) -> int:
        for seg in self.segments:
            if seg.type == PT_LOAD and seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return seg.offset + vaddr - seg.vaddr
        raise Unsupported(f"address {vaddr:#x} is in no loaded part of the file")

    def relocations(self, sec: fatbin.SectionHeader) -> list[tuple[int, int, int, int]]:
        """(file offset of the entry, r_offset, type, addend) for every RELA relocation.

        Refuses a library where a relocation names a symbol defined in `sec`: that is a pointer into
        the section that does not show as an addend.
        """
        if any(s.type == SHT_RELR for s in self.sections):
            raise Unsupported("packed RELR relocations")
        symbols = next((s for s in self.sections if s.type == SHT_DYNSYM), None)
        out = []
        for s in self.sections:
            if s.type != SHT_RELA:
                continue
            for at in range(s.offset, s.offset + s.size, 24):
                r_offset, info, addend = struct.unpack_from("<QQq", self.data, at)
                symbol = info >> 32
                if symbol and symbols is not None:
                    shndx, value = struct.unpack_from("<HQ", self.data, symbols.offset + symbol * 24 + 6)
                    if shndx == sec.number or sec.addr <= value < sec.addr + sec.size:
                        raise Unsupported(f"a relocation at {r_offset:#x} names a symbol in {SECTION}")
                out.append((at, r_offset, info & 0xFFFFFFFF, addend))
        return out

    def code_targets(self, wanted: set[int]) -> set[int]:
        """Which of the `wanted` addresses code takes or loads with a RIP-relative `lea`/`mov`.

        A byte scan, not a disassembly. Code that uses a fatbin itself (rather than through its
        wrapper) addresses its start, so only exact starts count: a chance match then needs a
        4-byte value to hit one of a few hundred addresses, and only keeps that fatbin in place.
        """
        found = set()
        for s in self.sections:
            if not s.flags & SHF_EXECINSTR or s.type != 1:
                continue
            code = self.data[s.offset:s.offset + s.size]
            for m in RIP_RELATIVE.finditer(code):
                at = m.end()
                target = s.addr + at + 4 + int.from_bytes(code[at:at + 4], "little", signed=True)
                if target in wanted:
                    found.add(target)
        return found


def read_containers(data: bytes | bytearray, sec: fatbin.SectionHeader) -> list[fatbin.Fatbin]:
    try:
        found = fatbin.fatbins(data, sec.offset, sec.size)
    except fatbin.NotTiled as why:
        raise Unsupported(f"{SECTION}: {why}") from None
    if not found:
        raise Unsupported(f"no fatbin in {SECTION}")
    return found


def wrapper_slots(elf: Elf, sec: fatbin.SectionHeader, starts: set[int]) -> dict[int, list[tuple[int, int]]]:
    """Fatbin address -> [(file offset of its RELA entry, file offset of the wrapper's data field)].

    Refuses a library where a relocation other than a wrapper's data pointer lands in the section:
    moving a fatbin would leave that pointer behind. A fatbin no wrapper reaches (cuRAND, cuSPARSE and
    cuSOLVER each have one; their own code may use it) is absent from the result: it keeps its address.
    """
    wrappers = elf.section(".nvFatBinSegment")
    if wrappers is None or wrappers.size % WRAPPER_SIZE:
        raise Unsupported("no .nvFatBinSegment of fatbin wrappers")
    fields = set()
    for at in range(wrappers.offset, wrappers.offset + wrappers.size, WRAPPER_SIZE):
        magic, = struct.unpack_from("<I", elf.data, at)
        if magic != WRAPPER_MAGIC:
            raise Unsupported(f"not a fatbin wrapper at file offset {at:#x}")
        fields.add(wrappers.addr + (at - wrappers.offset) + 8)
    slots: dict[int, list[tuple[int, int]]] = {}
    for entry_at, r_offset, rtype, addend in elf.relocations(sec):
        inside = sec.addr <= addend < sec.addr + sec.size
        if rtype == R_X86_64_RELATIVE and inside:
            if r_offset not in fields or addend not in starts:
                raise Unsupported(f"a pointer at {r_offset:#x} into {SECTION} is not a wrapper's")
            slots.setdefault(addend, []).append((entry_at, elf.file_offset(r_offset)))
    if not slots:
        raise Unsupported("no fatbin is reached through a wrapper")
    return slots


@dataclass
class Plan:
    data: bytearray            # the rewritten file
    dropped: dict[str, int]    # sm_XX -> bytes removed
    saved: int                 # bytes the file shrank
    kept_digest: str           # digest of every kept entry, in order: what the check compares
    pinned: set[int]           # addresses of the fatbins that must not move


def kept_digest(containers: list[fatbin.Fatbin], targets: list[str]) -> str:
    h = hashlib.sha256()
    for box in containers:
        for entry, raw in box.entries:
            if not droppable(entry, targets):
                h.update(raw)
    return h.hexdigest()


@dataclass
class Packed:
    """The section's new contents: the pruned fatbins packed from its start, the pinned ones where they stood."""
    body: bytes                # the new bytes of the section, from its start to the end of the last fatbin
    moved: dict[int, int]      # old fatbin address -> new address (pinned ones map to themselves)
    dropped: dict[str, int]    # sm_XX -> bytes removed


def pack(containers: list[fatbin.Fatbin], starts: list[int], pinned: set[int], base: int,
         targets: list[str]) -> Packed:
    """Step 1 of the rewrite: each fatbin without its dropped entries, placed right after the one before it
    unless it is pinned (code or no wrapper reaches it), when the gap before it is zero-filled instead.
    `base` is the section's address; `starts` the fatbins' addresses, in section order."""
    dropped: dict[str, int] = {}
    blobs, moved, pos = [], {}, 0
    for box, start in zip(containers, starts):
        if start in pinned:
            blobs.append(bytes(box.offset - pos))
            pos = box.offset
        for e, raw in box.entries:
            if droppable(e, targets):
                dropped[e.name] = dropped.get(e.name, 0) + len(raw)
        blob = without_dropped(box, targets)
        moved[start] = base + pos
        blobs.append(blob)
        pos += len(blob)
    return Packed(b"".join(blobs), moved, dropped)


@dataclass(frozen=True)
class Cut:
    """Step 3's cut: `size` bytes (whole pages) out of the file just before `end`, the section's old end."""
    end: int
    size: int

    def moved(self, offset: int) -> int:
        """Where a file offset of the original lies in the rewrite: everything from the section's end moves."""
        return offset - self.size if offset >= self.end else offset


def plan(data: bytes, targets: list[str]) -> Plan | None:
    """The pruned file, or None when nothing in it is for other archs. Raises Unsupported."""
    elf = Elf(data)
    sec = elf.section(SECTION)
    if sec is None or sec.size == 0:
        return None
    containers = read_containers(data, sec)
    if not any(droppable(e, targets) for box in containers for e, _raw in box.entries):
        return None
    starts = [sec.addr + box.offset for box in containers]
    slots = wrapper_slots(elf, sec, set(starts))
    pinned = {start for start in starts if start not in slots} | elf.code_targets(set(starts))
    packed = pack(containers, starts, pinned, sec.addr, targets)
    used = len(packed.body)
    cut = Cut(end=sec.offset + sec.size, size=(sec.size - used) // PAGE * PAGE)
    if cut.size == 0:
        return None
    seg = _load_segment(elf, sec)
    tail = seg.offset + seg.filesz - cut.end    # bytes of the segment after the section
    if tail and not any(s.type == PT_NOTE for s in elf.segments):
        raise Unsupported("no PT_NOTE program header to reuse for the split segment")
    out = bytearray(data[:sec.offset]) + packed.body + bytes(sec.size - cut.size - used) + data[cut.end:]
    _retarget_wrappers(out, data, packed.moved, slots, cut)
    _write_program_headers(out, elf, seg, tail, cut)
    _write_section_headers(out, elf, sec, used, cut)
    return Plan(out, packed.dropped, cut.size, kept_digest(containers, targets), pinned)


def _load_segment(elf: Elf, sec: fatbin.SectionHeader) -> Segment:
    """The one load segment holding the whole section, congruent with it modulo the page size."""
    load = [s for s in elf.segments if s.type == PT_LOAD and s.offset <= sec.offset
            and sec.offset + sec.size <= s.offset + s.filesz]
    if len(load) != 1 or (load[0].vaddr - load[0].offset) % PAGE or \
            sec.addr - sec.offset != load[0].vaddr - load[0].offset:
        raise Unsupported(f"{SECTION} is not inside one page-aligned load segment")
    return load[0]


def _retarget_wrappers(out: bytearray, data: bytes, moved: dict[int, int], slots: dict[int, list[tuple[int, int]]],
                       cut: Cut) -> None:
    """Step 2: each wrapper's relocation addend, and its data field when the file holds it in place, to the new
    address. Relocations first (their entries lie before the section), then the in-place wrapper fields."""
    for old, new in moved.items():
        for entry_at, field_at in slots.get(old, []):
            struct.pack_into("<q", out, cut.moved(entry_at) + 16, new)
            value, = struct.unpack_from("<Q", data, field_at)
            if value not in (0, old):
                raise Unsupported(f"wrapper field at {field_at:#x} holds neither 0 nor its addend")
            if value:
                struct.pack_into("<Q", out, cut.moved(field_at), new)


def _write_program_headers(out: bytearray, elf: Elf, seg: Segment, tail: int, cut: Cut) -> None:
    """Step 3's program headers: `seg` split in two (the second taking the first PT_NOTE's slot) when sections
    follow the fatbins in it, and every later segment at its moved file offset."""
    notes = [s for s in elf.segments if s.type == PT_NOTE]
    phdrs = []
    for s in elf.segments:
        if s.type == PT_NOTE and tail and s is notes[0]:
            continue
        if s is seg:
            head = cut.end - cut.size - seg.offset
            phdrs.append((PT_LOAD, s.flags, s.offset, s.vaddr, head, head, s.align))
            if tail:
                phdrs.append((PT_LOAD, s.flags, cut.end - cut.size, s.vaddr + (cut.end - s.offset), tail,
                              s.memsz - (cut.end - s.offset), PAGE))
            continue
        phdrs.append((s.type, s.flags, cut.moved(s.offset), s.vaddr, s.filesz, s.memsz, s.align))
    for i, (ptype, flags, offset, vaddr, filesz, memsz, align) in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, elf.phoff + i * elf.phentsize,
                         ptype, flags, offset, vaddr, vaddr, filesz, memsz, align)


def _write_section_headers(out: bytearray, elf: Elf, sec: fatbin.SectionHeader, used: int, cut: Cut) -> None:
    """Step 3's section headers: the table and every section at its moved file offset; the fatbin section
    shrunk to the bytes its packed fatbins use."""
    shoff = cut.moved(elf.shoff)
    struct.pack_into("<Q", out, 0x28, shoff)
    for s in elf.sections:
        at = shoff + s.number * elf.shentsize
        struct.pack_into("<Q", out, at + 0x18, cut.moved(s.offset))
        if s.number == sec.number:
            struct.pack_into("<Q", out, at + 0x20, used)


def check(plan_: Plan, targets: list[str]) -> None:
    """Parse the rewritten file as the loader and the CUDA runtime would, and compare with the plan."""
    elf = Elf(plan_.data)
    sec = elf.section(SECTION)
    assert sec is not None
    containers = read_containers(plan_.data, sec)
    starts = {sec.addr + box.offset for box in containers}
    if not plan_.pinned <= starts:
        raise Unsupported("the check found a fatbin reached from code moved")
    slots = wrapper_slots(elf, sec, starts)  # nothing but wrappers points in
    for start, places in slots.items():
        for _entry_at, field_at in places:
            value, = struct.unpack_from("<Q", plan_.data, field_at)
            if value not in (0, start):
                raise Unsupported("the check found a wrapper pointing elsewhere than its relocation")
    if any(droppable(e, targets) for box in containers for e, _raw in box.entries):
        raise Unsupported("the check found a dropped entry still in place")
    if kept_digest(containers, targets) != plan_.kept_digest:
        raise Unsupported("the check found kept entries changed")
    loads = sorted((s.vaddr, s.offset, s.filesz) for s in elf.segments if s.type == PT_LOAD)
    for vaddr, offset, filesz in loads:
        if (vaddr - offset) % PAGE or offset + filesz > len(plan_.data):
            raise Unsupported("the check found a load segment out of place")
