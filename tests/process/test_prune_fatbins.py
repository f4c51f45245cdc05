"""The fatbin pruner (images/lean/prune_fatbins.py) on real shared libraries: gcc and ld build them the
way nvcc's host code lays them out (fatbins in `.nv_fatbin`, one `__fatbinwrap`-like wrapper each in
`.nvFatBinSegment`, sections after the fatbins in the same load segment), the pruner rewrites them,
and the system's dynamic loader loads the result: the wrappers must lead to the packed fatbins and
every address after the cut must still hold its bytes.
"""

from __future__ import annotations

import ctypes
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import core, pruned
from tests import needs

ROOT = Path(__file__).resolve().parents[2]
PRUNER = ROOT / "images" / "lean" / "prune_fatbins.py"
TARGETS = "sm_90a,sm_100a,sm_120a"
FATBIN_MAGIC = 0xBA55ED50
SASS, PTX = 2, 1

LIBRARY_C = r"""
__asm__(".pushsection .nv_fatbin,\"a\"\n.balign 8\nfb0:\n.incbin \"fb0.bin\"\n.balign 8\nfb1:\n.incbin \"fb1.bin\"\n"
        ".popsection\n.pushsection .nv_tail,\"a\"\n.globl tail\ntail:\n.ascii \"after the fatbins\\0\"\n"
        ".popsection\n");
extern const unsigned char fb0[], fb1[];
extern const char tail[];
struct wrapper { unsigned int magic, version; const void *data; void *name; };
#define WRAPPER __attribute__((section(".nvFatBinSegment"), used, aligned(8))) struct wrapper
WRAPPER w0 = {0x466243b1, 1, fb0, 0};
#ifndef NO_SECOND_WRAPPER
WRAPPER w1 = {0x466243b1, 1, fb1, 0};
#endif
#ifdef STRAY_POINTER
const void *stray = fb1;   /* a pointer into .nv_fatbin that is not a wrapper's */
#endif
const void *wrapped(void) { return w0.data; }
#if defined(CODE_REFERENCE)
const void *second(void) { return fb1; }   /* reached from code, as curand reaches one of its fatbins */
#else
const void *second(void) { return w1.data; }
#endif
const char *tail_text(void) { return tail; }
"""

LOADER = r"""
import ctypes, json, struct, sys
lib = ctypes.CDLL(sys.argv[1])
lib.wrapped.restype = lib.second.restype = ctypes.c_void_p
lib.tail_text.restype = ctypes.c_char_p

def read(at):
    magic, _v, _h, size = struct.unpack("<IHHQ", ctypes.string_at(at, 16))
    body, entries, pos = ctypes.string_at(at + 16, size), [], 0
    while pos < len(body):
        kind, _, ehsize, payload = struct.unpack_from("<HHIQ", body, pos)
        arch, = struct.unpack_from("<I", body, pos + 28)
        entries.append([kind, arch, sorted(set(body[pos + ehsize:pos + ehsize + payload]))])
        pos += ehsize + payload
    return {"magic": magic, "entries": entries}

print(json.dumps({"first": read(lib.wrapped()), "second": read(lib.second()), "tail": lib.tail_text().decode()}))
"""

FIRST = [[2, 90, [90]], [1, 90, [90]]]
SECOND = [[2, 100, [100]]]


def entry(kind: int, arch: int, payload: int) -> bytes:
    """A fatbin entry whose payload bytes all equal arch % 256, so a misplaced byte shows."""
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64, payload)
    struct.pack_into("<I", header, 28, arch)
    struct.pack_into("<Q", header, 40, 0x11)
    return bytes(header) + bytes([arch % 256]) * payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def build(folder: Path, *defines: str, link: tuple[str, ...] = ()) -> Path:
    gcc = needs.tool("gcc", ".ci/install-engine installs gcc")
    folder.mkdir(parents=True, exist_ok=True)
    # sm_80 and sm_86 run on no target; sm_90, sm_100 and the PTX stay.
    (folder / "fb0.bin").write_bytes(fatbin(entry(SASS, 80, 20000), entry(SASS, 90, 800), entry(PTX, 90, 160)))
    (folder / "fb1.bin").write_bytes(fatbin(entry(SASS, 86, 9000), entry(SASS, 100, 400)))
    (folder / "lib.c").write_text(LIBRARY_C)
    out = folder / "libkernels.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", *(f"-D{d}" for d in defines), "-o", str(out), "lib.c", *link],
                   cwd=folder, check=True)
    return out


def prune(site: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = site / "report.json"
    done = subprocess.run([sys.executable, str(PRUNER), str(site), "--archs", TARGETS, "--report", str(report)],
                          capture_output=True, text=True, check=True)
    return done, json.loads(report.read_text())


def load(path: Path) -> dict[str, Any]:
    """Load the library with the system's loader, in a child process (a bad rewrite may crash it)."""
    done = subprocess.run([sys.executable, "-c", LOADER, str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


def program_headers(path: Path) -> list[int]:
    data = path.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]


def test_pruned_library_loads_with_kept_entries_only(tmp_path: Path) -> None:
    lib = build(tmp_path / "site")
    before = lib.stat().st_size
    assert load(lib)["first"] == {"magic": FATBIN_MAGIC, "entries": [[SASS, 80, [80]], *FIRST]}
    done, report = prune(lib.parent)
    after = lib.stat().st_size
    dropped = 20000 + 64 + 9000 + 64
    assert (before - after) % 4096 == 0 and dropped - 4096 < before - after <= dropped
    assert report["pruned"]["libkernels.so"] == {"dropped": {"sm_80": 20064, "sm_86": 9064},
                                                 "saved_bytes": before - after}
    assert "libkernels.so: removed cubins for sm_80, sm_86" in done.stdout
    loaded = load(lib)
    assert loaded["first"] == {"magic": FATBIN_MAGIC, "entries": FIRST}
    assert loaded["second"] == {"magic": FATBIN_MAGIC, "entries": SECOND}
    assert loaded["tail"] == "after the fatbins"          # read from its old address, new file offset
    kinds = program_headers(lib)
    assert 4 not in kinds and kinds.count(1) == 5         # PT_NOTE became the split segment's PT_LOAD


@pytest.mark.parametrize("defines", [("CODE_REFERENCE",), ("CODE_REFERENCE", "NO_SECOND_WRAPPER")])
def test_fatbin_reached_from_code_keeps_its_address(tmp_path: Path, defines: tuple[str, ...]) -> None:
    """Code that addresses the second fatbin (with or without its wrapper) pins it: pruned where it stands."""
    lib = build(tmp_path / "site", *defines)
    before = lib.stat().st_size
    _done, report = prune(lib.parent)
    assert report["pruned"]["libkernels.so"]["dropped"] == {"sm_80": 20064, "sm_86": 9064}
    assert before - lib.stat().st_size == 8192            # only the space after the pinned fatbin is cut
    loaded = load(lib)
    assert loaded["first"]["entries"] == FIRST and loaded["second"]["entries"] == SECOND
    assert loaded["tail"] == "after the fatbins"


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    lib = build(tmp_path / "site")
    prune(lib.parent)
    first = lib.read_bytes()
    _done, report = prune(lib.parent)
    assert lib.read_bytes() == first and report["pruned"] == {} and report["kept"] == {}


def test_library_with_a_stray_pointer_into_its_fatbins_is_kept(tmp_path: Path) -> None:
    lib = build(tmp_path / "site", "STRAY_POINTER", "CODE_REFERENCE")
    original = lib.read_bytes()
    done, report = prune(lib.parent)
    assert lib.read_bytes() == original
    assert "is not a wrapper's" in str(report["kept"]["libkernels.so"]) and "kept libkernels.so" in done.stdout
    assert load(lib)["first"]["entries"][0] == [SASS, 80, [80]]


def test_unknown_arch_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(PRUNER), str(tmp_path), "--archs", "hopper"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "not a GPU arch: 'hopper'" in done.stderr and "Traceback" not in done.stderr


def test_verifier_loads_what_the_pruner_rewrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The arch-audit check: the layer reports name the rewritten library, and the loader loads it."""
    lib = build(tmp_path / "site")
    reports = tmp_path / "fatbins"
    reports.mkdir()
    subprocess.run([sys.executable, str(PRUNER), str(lib.parent), "--archs", TARGETS,
                    "--report", str(reports / "sglang.json")], capture_output=True, check=True)
    monkeypatch.setenv(pruned.REPORTS_ENV, str(reports))
    found = pruned.libraries()
    assert list(found) == [str(lib)]
    assert found[str(lib)]["layer"] == "sglang" and found[str(lib)]["dropped"] == {"sm_80": 20064, "sm_86": 9064}
    done = core.python_snippet(pruned.dlopen_snippet(list(found)), timeout=60)
    assert '"loaded": 1, "mapped_but_need_the_gpu_driver": [], "failed": {}' in done.stdout
    data = bytearray(lib.read_bytes())                     # a damaged rewrite: the split segment misplaced
    phoff, = struct.unpack_from("<Q", data, 0x20)
    loads = [phoff + i * 56 for i, kind in enumerate(program_headers(lib)) if kind == 1]
    struct.pack_into("<Q", data, loads[3] + 8, struct.unpack_from("<Q", data, loads[3] + 8)[0] + 8)
    lib.write_bytes(bytes(data))
    done = core.python_snippet(pruned.dlopen_snippet(list(found)), timeout=60)
    assert '"loaded": 0' in done.stdout and str(lib) in done.stdout


def pruned_library_linking(tmp_path: Path, soname: str, source: str) -> tuple[Path, Path]:
    """A pruned library linked against a stub `soname` built from C `source`: (library, stub)."""
    gcc = needs.tool("gcc", ".ci/install-engine installs gcc")
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "stub.c").write_text(source)
    subprocess.run([gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(stub / soname), str(stub / "stub.c")],
                   check=True)
    lib = build(tmp_path / "site", link=("-Wl,--no-as-needed", f"-L{stub}", f"-l:{soname}"))
    prune(lib.parent)
    return lib, stub / soname


def test_library_linking_the_gpu_driver_is_mapped_on_a_machine_without_one(tmp_path: Path) -> None:
    """Like sgl_kernel's ops: linked against libcuda.so.1, which a CPU runner lacks."""
    lib, _ = pruned_library_linking(tmp_path, "libcuda.so.1", "int cuInit(unsigned int flags) { return (int)flags; }\n")
    done = core.python_snippet(pruned.dlopen_snippet([str(lib)]), timeout=60)
    if driver_present():   # a GPU runner: the real libcuda.so.1 satisfies the link
        assert '"loaded": 1, "mapped_but_need_the_gpu_driver": [], "failed": {}' in done.stdout
    else:
        assert f'"loaded": 0, "mapped_but_need_the_gpu_driver": ["{lib}"], "failed": {{}}' in done.stdout


def test_library_whose_dependency_the_image_lacks_is_mapped_not_failed(tmp_path: Path) -> None:
    """Like torchcodec's per-FFmpeg cores: linked against libavutil.so.56, which the image never had."""
    lib, stub = pruned_library_linking(tmp_path, "libavutil.so.56", "int av_version_info(void) { return 56; }\n")
    stub.unlink()  # absent at load time, as in the image
    done = core.python_snippet(pruned.dlopen_snippet([str(lib)]), timeout=60)
    assert f'"failed": {{}}, "mapped_but_a_dependency_is_absent": {{"{lib}": "libavutil.so.56"}}' in done.stdout
    assert '"loaded": 0' in done.stdout


def driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# A reference the loader must resolve when it maps the library (data, not a lazily bound call): the torch
# symbol torchao 0.9's extension needs, spelled in the pre-C++11 ABI that torch >= 2.7 does not export.
TORCH_REFERENCE = r"""
extern int torch_library __asm__("_ZN5torch7LibraryC1ENS0_4KindESsSt8optionalIN3c1011DispatchKeyEEPKcj");
int *needs_torch = &torch_library;
"""


def build_needing_old_torch(site: Path) -> Path:
    """The library of `build`, plus a reference to a torch symbol no torch >= 2.7 exports: the loader refuses it."""
    build(site)
    (site / "lib.c").write_text(LIBRARY_C + TORCH_REFERENCE)
    gcc = needs.tool("gcc", ".ci/install-engine installs gcc")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", "libkernels.so", "lib.c"], cwd=site, check=True)
    return site / "libkernels.so"


def test_library_that_did_not_load_before_is_recorded_not_blamed(tmp_path: Path) -> None:
    """Like torchao 0.9's _C.abi3.so under torch 2.9: unloadable before the rewrite, and so after it."""
    site = tmp_path / "site"
    build_needing_old_torch(site)
    done, report = prune(site)
    entry = report["pruned"]["libkernels.so"]
    assert entry["dropped"] == {"sm_80": 20064, "sm_86": 9064}
    assert "undefined symbol: _ZN5torch7Library" in entry["did_not_load_before"]
    assert "libkernels.so did not load before the rewrite either" in done.stdout


BREAKING_PRUNER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import prune_fatbins as p
prepare = p.prepare
def broken(path, targets):   # a rewrite the plan check passes but the loader refuses: its tail cut off
    done = prepare(path, targets)
    if done:
        with open(done[0], "r+b") as fh:
            fh.truncate(4096)
    return done
p.prepare = broken
sys.exit(p.main(sys.argv[2:]))
"""


def test_a_rewrite_that_breaks_a_loadable_library_fails_the_layer(tmp_path: Path) -> None:
    lib = build(tmp_path / "site")
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-c", BREAKING_PRUNER, str(PRUNER.parent), str(lib.parent),
                           "--archs", TARGETS, "--report", str(report)], capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the rewrite of libkernels.so cannot be vouched for (it loaded before)" in done.stderr
    assert not list(lib.parent.glob("*.pruning"))


DEAD_CHECK = r"""
import sys
sys.path.insert(0, sys.argv[1])
import prune_fatbins as p
p._load = lambda paths: "exit -11: the interpreter crashed"   # every check process dies
sys.exit(p.main(sys.argv[2:]))
"""


def test_a_rewrite_nobody_could_load_before_is_not_vouched_for(tmp_path: Path) -> None:
    lib = build(tmp_path / "site")
    done = subprocess.run([sys.executable, "-c", DEAD_CHECK, str(PRUNER.parent), str(lib.parent), "--archs", TARGETS],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot be vouched for (before: the load check died: exit -11" in done.stderr


def test_an_unloadable_library_the_rewrite_damages_further_fails_the_layer(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_needing_old_torch(site)
    done = subprocess.run([sys.executable, "-c", BREAKING_PRUNER, str(PRUNER.parent), str(site), "--archs", TARGETS],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot be vouched for (before: " in done.stderr and "undefined symbol: _ZN5torch" in done.stderr
