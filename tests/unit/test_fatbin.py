"""The stdlib ELF/fatbin reader, on a synthetic ELF file built here, and CUDA's compatibility rules."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from buildscripts.probe import fatbin

ARCH_SPECIFIC, FAMILY, COMPRESSED = 0x100000, 0x200000, 0x8000


def entry(kind: int, arch: int, flags: int = 0x11, payload: bytes = b"\0" * 24, ptx: tuple[int, int] = (0, 0)) -> bytes:
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64, len(payload))
    struct.pack_into("<IIHHI", header, 16, len(payload) - 4 if flags & COMPRESSED else 0, 0, ptx[1], ptx[0], arch)
    struct.pack_into("<Q", header, 40, flags)
    return bytes(header) + payload


def fatbin_blob(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with_sections(sections: dict[str, bytes]) -> bytes:
    """A minimal ELF64 little-endian file: header, section payloads, .shstrtab, section header table."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    data, offsets = bytearray(b"\0" * 64), []
    for payload in [*sections.values(), names]:
        while len(data) % 8:
            data.append(0)
        offsets.append(len(data))
        data += payload
    while len(data) % 8:
        data.append(0)
    shoff = len(data)
    table = bytearray(64)  # the null section
    name_at = 1
    for (name, payload), offset in zip([*sections.items(), (".shstrtab", names)], offsets, strict=True):
        table += struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offset, len(payload), 0, 0, 8, 0)
        name_at += len(name) + 1
    data += table
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                         len(sections) + 2, len(sections) + 1)
    data[:64] = header
    return bytes(data)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    first = fatbin_blob(entry(2, 90, 0x11 | ARCH_SPECIFIC), entry(2, 100, 0x11 | ARCH_SPECIFIC | COMPRESSED),
                        entry(1, 120, 0x11 | COMPRESSED, ptx=(9, 0)))
    second = fatbin_blob(entry(2, 80), entry(2, 100, 0x11 | FAMILY))
    padding = b"\0" * 24   # fatbins are packed 8-byte aligned with gaps between them
    path = tmp_path / "libkernels.so"
    path.write_bytes(elf_with_sections({".text": b"\x90" * 40, ".nv_fatbin": first + padding + second}))
    return path


def test_reads_every_entry_of_every_fatbin(library: Path) -> None:
    names = [e.name for e in fatbin.read_file(str(library))]
    assert names == ["sm_90a", "sm_100a", "compute_120", "sm_80", "sm_100f"]
    entries = fatbin.read_file(str(library))
    assert entries[1].compressed and not entries[0].compressed
    assert entries[2].ptx_version == "9.0"


def test_coverage_per_target_arch(library: Path) -> None:
    cover = fatbin.coverage(fatbin.read_file(str(library)), ["sm_90a", "sm_100a", "sm_103a", "sm_120a", "sm_75"])
    assert cover["sm_90a"]["status"] == "sass"
    assert cover["sm_100a"]["sass"] == ["sm_100a", "sm_100f"]
    assert cover["sm_103a"] == {"status": "sass", "sass": ["sm_100f"], "ptx": []}   # the family covers sm_103
    assert cover["sm_120a"] == {"status": "ptx", "sass": [], "ptx": ["compute_120"]}
    assert cover["sm_75"]["status"] == "missing"


def test_compatibility_rules() -> None:
    sass = fatbin.Entry("sass", 90, "a", False, "")
    assert fatbin.runs_on(sass, "sm_90a") and not fatbin.runs_on(sass, "sm_100a")
    plain = fatbin.Entry("sass", 80, "", False, "")
    assert fatbin.runs_on(plain, "sm_86") and not fatbin.runs_on(plain, "sm_90a")
    ptx = fatbin.Entry("ptx", 90, "", False, "8.0")
    assert fatbin.runs_on(ptx, "sm_120a") and not fatbin.runs_on(ptx, "sm_80")
    ptx_a = fatbin.Entry("ptx", 100, "a", False, "8.7")
    assert fatbin.runs_on(ptx_a, "sm_100a") and not fatbin.runs_on(ptx_a, "sm_120a")


def test_a_library_without_gpu_code_and_a_non_elf_file(tmp_path: Path) -> None:
    plain = tmp_path / "libplain.so"
    plain.write_bytes(elf_with_sections({".text": b"\x90" * 16}))
    assert fatbin.read_file(str(plain)) == []
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an elf at all" * 8)
    with pytest.raises(fatbin.NotElf):
        fatbin.read_file(str(junk))
    with pytest.raises(ValueError, match="not a GPU arch"):
        fatbin.parse_arch("hopper")


def test_shared_objects_finds_so_files_once(tmp_path: Path, library: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "libx.so.12").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "alias.so").symlink_to(library)
    found = fatbin.shared_objects(str(tmp_path))
    assert len(found) == 2   # the symlink and its target are one library
    assert {Path(p).resolve().name for p in found} == {"libkernels.so", "libx.so.12"}
