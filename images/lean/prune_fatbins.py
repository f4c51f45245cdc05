#!/usr/bin/env python3
"""Remove, from the shared libraries a layer installed, the GPU machine code no target arch can run.

    python3 prune_fatbins.py SITE_PACKAGES --archs sm_90a,sm_100a,sm_120a [--report FILE]

A CUDA library carries one cubin (SASS) per GPU arch it was built for in its `.nv_fatbin` section:
flash_ops of sgl_kernel 1.0 GB of which 0.54 GB is for sm_80/sm_86, libtorch_cuda 0.3 GB of which
0.13 GB is for sm_75-sm_86, and so on. A cubin runs only on its own major arch at an equal or newer
minor (`fatbin.runs_on`), so in an image whose cells target sm_90a/sm_100a/sm_120a a cubin for sm_80
or sm_103 can never load. Those entries go; PTX always stays (the driver can compile it forward), and
so does every cubin that runs on some target.

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
pointer into the section from anywhere but a wrapper, no PT_NOTE slot) is left as it is,
and the output says why. Each rewritten file is parsed again and compared with the plan before it
replaces the original.

The pruner never makes a loadable library unloadable: the dynamic loader loads every library it is about
to replace before and after (the verifier's own load check, probe/pruned.py, with this Python), and a
library that loaded before and fails after fails the layer; so does one that fails otherwise after than
before, and one whose check could not run at all. One that did not load before either (an
extension built against another torch, say) is no fault of the rewrite: the report records its error,
and the verifier judges it (probe/extensions.py). Standard library only: it runs inside the image build.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass

# The probe's fatbin reader: copied beside this file in the image, in buildscripts/probe in the project.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, "..", "..", "buildscripts", "probe")]
import fatbin  # noqa: E402
import pruned  # noqa: E402

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
        moved[start] = sec.addr + pos
        blobs.append(blob)
        pos += len(blob)
    used = pos
    cut = (sec.size - used) // PAGE * PAGE
    if cut == 0:
        return None
    load = [s for s in elf.segments if s.type == PT_LOAD and s.offset <= sec.offset
            and sec.offset + sec.size <= s.offset + s.filesz]
    if len(load) != 1 or (load[0].vaddr - load[0].offset) % PAGE or \
            sec.addr - sec.offset != load[0].vaddr - load[0].offset:
        raise Unsupported(f"{SECTION} is not inside one page-aligned load segment")
    seg = load[0]
    end = sec.offset + sec.size             # old end of the section: everything from here moves
    tail = seg.offset + seg.filesz - end    # bytes of the segment after the section
    notes = [s for s in elf.segments if s.type == PT_NOTE]
    if tail and not notes:
        raise Unsupported("no PT_NOTE program header to reuse for the split segment")

    out = bytearray(data[:sec.offset])
    out += b"".join(blobs)
    out += bytes(sec.size - cut - used)
    out += data[end:]

    def moved_offset(offset: int) -> int:
        return offset - cut if offset >= end else offset

    # Relocations first (their entries lie before the section), then the in-place wrapper fields.
    for old, new in moved.items():
        for entry_at, field_at in slots.get(old, []):
            struct.pack_into("<q", out, moved_offset(entry_at) + 16, new)
            value, = struct.unpack_from("<Q", data, field_at)
            if value not in (0, old):
                raise Unsupported(f"wrapper field at {field_at:#x} holds neither 0 nor its addend")
            if value:
                struct.pack_into("<Q", out, moved_offset(field_at), new)

    phdrs = []
    for s in elf.segments:
        if s.type == PT_NOTE and tail and s is notes[0]:
            continue
        if s is seg:
            head = end - cut - seg.offset
            phdrs.append((PT_LOAD, s.flags, s.offset, s.vaddr, head, head, s.align))
            if tail:
                phdrs.append((PT_LOAD, s.flags, end - cut, s.vaddr + (end - s.offset), tail,
                              s.memsz - (end - s.offset), PAGE))
            continue
        phdrs.append((s.type, s.flags, moved_offset(s.offset), s.vaddr, s.filesz, s.memsz, s.align))
    for i, (ptype, flags, offset, vaddr, filesz, memsz, align) in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, elf.phoff + i * elf.phentsize,
                         ptype, flags, offset, vaddr, vaddr, filesz, memsz, align)
    shoff = moved_offset(elf.shoff)
    struct.pack_into("<Q", out, 0x28, shoff)
    for s in elf.sections:
        at = shoff + s.number * elf.shentsize
        struct.pack_into("<Q", out, at + 0x18, moved_offset(s.offset))
        if s.number == sec.number:
            struct.pack_into("<Q", out, at + 0x20, used)
    return Plan(out, dropped, cut, kept_digest(containers, targets), pinned)


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


def prepare(path: str, targets: list[str]) -> tuple[str, dict[str, int], int] | None:
    """Write the rewrite of one library beside it (PATH.pruning): (that file, bytes dropped per arch, bytes
    saved), or None when nothing changes. The original stays in place until `main` has loaded it."""
    with open(path, "rb") as fh:
        data = fh.read()
    result = plan(data, targets)
    if result is None:
        return None
    check(result, targets)
    tmp = path + ".pruning"
    with open(tmp, "wb") as fh:
        fh.write(result.data)
    os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    return tmp, dict(sorted(result.dropped.items())), result.saved


def load_failures(paths: list[str]) -> dict[str, str]:
    """Path -> the loader's error, for each of `paths` that does not load (in a fresh process that imported
    torch first, as a server does). A dependency absent from the image, or the GPU driver, is no failure:
    the loader names those only after it has mapped the library itself. When the process dies (a broken
    file can crash the loader), each library is loaded in a process of its own, so the one is named."""
    if not paths:
        return {}
    done = _load(paths)
    if isinstance(done, dict):
        return done
    if len(paths) == 1:
        return {paths[0]: DIED + done}
    return {path: why for one in paths for path, why in load_failures([one]).items()}


DIED = "the load check died: "   # the prefix of a library's entry when its own check process died


def _load(paths: list[str]) -> dict[str, str] | str:
    """The failures of one load check, or why the check process died (a crash, a hang, garbled output)."""
    try:
        done = subprocess.run([sys.executable, "-c", pruned.dlopen_snippet(paths)], capture_output=True,
                              text=True, check=False, timeout=1800)
    except subprocess.TimeoutExpired:
        return "no answer within 1800 s"
    for line in done.stdout.splitlines():
        if line.startswith("@@pruned-load "):
            try:
                failed: dict[str, str] = json.loads(line[len("@@pruned-load "):])["failed"]
            except (ValueError, KeyError, TypeError):
                break
            return failed
    return f"exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}".rstrip(": \n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site")
    parser.add_argument("--archs", required=True, help="comma-separated target archs, e.g. sm_90a,sm_100a")
    parser.add_argument("--report", help="JSON file listing what was removed and what was kept, and why")
    args = parser.parse_args(argv)
    targets = [a.strip() for a in args.archs.split(",") if a.strip()]
    for t in targets:
        try:
            fatbin.parse_arch(t)
        except ValueError as why:
            parser.error(str(why))
    rewritten: dict[str, dict[str, object]] = {}
    total = 0
    kept: dict[str, str] = {}
    rewrites: dict[str, str] = {}   # library -> its rewrite, not yet in place
    try:
        for path in fatbin.shared_objects(args.site):
            if os.path.islink(path):
                continue
            rel = os.path.relpath(path, args.site)
            try:
                done = prepare(path, targets)
            except Unsupported as why:
                kept[rel] = str(why)
                print(f"fatbins: kept {rel}: {why}")
                continue
            if done:
                rewrites[path], dropped, saved = done
                rewritten[rel] = {"dropped": dropped, "saved_bytes": saved}
                total += saved
                print(f"fatbins: {rel}: removed cubins for {', '.join(dropped)} ({saved >> 20} MiB)")
        before = load_failures(sorted(rewrites))
        for path, tmp in rewrites.items():
            os.replace(tmp, path)
        after = load_failures(sorted(rewrites))
    finally:
        for tmp in rewrites.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
    # Broken by the rewrite: a library that loaded before and does not now, one that failed before and fails
    # otherwise now (the rewrite damaged it further), and one whose check could not run before (nothing can
    # vouch for the rewrite of a library nobody could load).
    broken = {path: why for path, why in after.items() if before.get(path) != why}
    broken |= {path: why for path, why in before.items() if why.startswith(DIED)}
    for path, why in sorted(broken.items()):
        was = before.get(path)
        then = "it loaded before" if was is None else f"before: {was[-200:]}"
        print(f"fatbins: the rewrite of {os.path.relpath(path, args.site)} cannot be vouched for ({then}): {why}",
              file=sys.stderr)
    for path, why in sorted(set(before.items()) - set(broken.items())):
        rel = os.path.relpath(path, args.site)
        rewritten[rel]["did_not_load_before"] = why[-300:]
        print(f"fatbins: {rel} did not load before the rewrite either: {why[-200:]}")
    print(f"fatbins: {total >> 20} MiB removed in all")
    if args.report:
        os.makedirs(os.path.dirname(args.report) or ".", exist_ok=True)
        with open(args.report, "w") as fh:
            json.dump({"site": os.path.abspath(args.site), "archs": targets, "pruned": rewritten, "kept": kept}, fh,
                      indent=1, sort_keys=True)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
