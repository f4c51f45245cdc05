"""The bake's repeatable outputs (images/warm/repeatable.py) on real files, no Docker, no GPU:
  - ELF objects from the machine's C compiler: two builds of one source whose temporary file name carried
    other process ids (as nvcc's tmpxft_<pid>_... do) come out byte for byte the same, the library still
    loads and runs, a same-looking string in the object's data is left alone;
  - ninja's records, written by the ninja the images run (PyPI's): two builds of one project, in another
    order and at other times, leave the same .ninja_log and .ninja_deps once clamped, and ninja still finds
    nothing to do, yet rebuilds what a changed header touches."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests import image_scripts, needs

repeatable = image_scripts.load(Path("images/warm/repeatable.py"))
SOURCE = r"""
const char *kept(void) { return "tmpxft_0000beef_00000000-6_data"; }
int twice(int x) { return 2 * x; }
"""


def _built(tmp_path: Path, pid: str, kind: str) -> Path:
    """SOURCE compiled from a file named as nvcc names its host-side temporary, in a folder of its own."""
    cc = needs.tool("cc", hint="Debian's gcc")
    folder = tmp_path / pid / kind
    folder.mkdir(parents=True)
    source = folder / f"tmpxft_{pid}_00000000-6_k.cudafe1.c"
    source.write_text(SOURCE)
    out = folder / f"k.{kind}"
    flags = ["-shared", "-fPIC"] if kind == "so" else ["-c", "-fPIC"]
    subprocess.run([cc, *flags, "-O1", str(source.name), "-o", str(out)], cwd=folder, check=True)
    return out


@pytest.mark.parametrize("kind", ["o", "so"])
def test_two_builds_differing_by_nvccs_process_id_come_out_the_same(tmp_path: Path, kind: str) -> None:
    first, second = _built(tmp_path, "0000002a", kind), _built(tmp_path, "00001f3c", kind)
    assert first.read_bytes() != second.read_bytes()   # the file name is in each, as in nvcc's objects
    stamp = os.stat(first).st_mtime_ns
    assert repeatable.make_repeatable([str(tmp_path)], None)["objects"] == 2
    assert first.read_bytes() == second.read_bytes()
    assert b"tmpxft_00000000_00000000-6_k.cudafe1.c" in first.read_bytes()
    assert b"tmpxft_0000beef_00000000-6_data" in first.read_bytes()   # data, not a symbol's name: kept
    assert os.stat(first).st_mtime_ns == stamp   # ninja's view of the file is unchanged
    assert repeatable.make_repeatable([str(tmp_path)], None)["objects"] == 0   # nothing left to change


def test_a_steadied_library_still_loads_and_runs(tmp_path: Path) -> None:
    library = _built(tmp_path, "0000002a", "so")
    assert repeatable.steady(str(library))
    loaded = ctypes.CDLL(str(library))
    assert loaded.twice(21) == 42
    loaded.kept.restype = ctypes.c_char_p
    assert loaded.kept() == b"tmpxft_0000beef_00000000-6_data"


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 100, b"not an object at all" * 10])
def test_what_is_no_elf64_object_is_left_as_it_is(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.so"
    path.write_bytes(data)
    assert repeatable.steady(str(path)) is False
    assert path.read_bytes() == data


# --------------------------------------------------------------------------------------------- ninja's records
NINJA_PROJECT = """rule cc
  command = {cc} -MMD -MF $out.d -fPIC -c $in -o $out
  depfile = $out.d
  deps = gcc
rule link
  command = {cc} -shared $in -o $out
build a.o: cc a.c
build b.o: cc b.c
build lib.so: link a.o b.o
"""


def _ninja() -> str:
    import ninja  # the test extra's (pyproject.toml): the ninja the images run

    return str(Path(ninja.BIN_DIR) / "ninja")


def _project(folder: Path, cc: str) -> None:
    folder.mkdir(parents=True)
    (folder / "h.h").write_text("#define TWICE(x) (2 * (x))\n")
    (folder / "a.c").write_text('#include "h.h"\nint a(int x) { return TWICE(x); }\n')
    (folder / "b.c").write_text('#include "h.h"\nint b(int x) { return TWICE(x) + 1; }\n')
    (folder / "build.ninja").write_text(NINJA_PROJECT.format(cc=cc))


def _clamp_times(folder: Path, epoch: int) -> None:
    """What a stamped build's exporter does: every file time newer than the epoch set to it."""
    for path in folder.rglob("*"):
        if path.stat().st_mtime > epoch:
            os.utime(path, (epoch, epoch))


def _ninja_says(ninja: str, folder: Path, *args: str) -> str:
    done = subprocess.run([ninja, *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


def _deps_without_times(text: str) -> list[str]:
    return [re.sub(r"deps mtime \d+", "deps mtime T", line) for line in text.splitlines()]


def test_two_builds_in_another_order_leave_the_same_ninja_records_and_nothing_to_do(tmp_path: Path) -> None:
    ninja, cc = _ninja(), needs.tool("cc", hint="Debian's gcc")
    epoch = int(time.time()) - 86400
    first, second = tmp_path / "first", tmp_path / "second"
    _project(first, cc)
    _ninja_says(ninja, first, "-j1")
    _project(second, cc)
    for target in ("b.o", "a.o", "lib.so"):   # the other order, one job at a time
        _ninja_says(ninja, second, "-j1", target)
    for name in (".ninja_log", ".ninja_deps"):
        assert (first / name).read_bytes() != (second / name).read_bytes(), name
    deps_before = _deps_without_times(_ninja_says(ninja, first, "-t", "deps"))

    for folder in (first, second):
        assert repeatable.make_repeatable([str(folder)], str(epoch)) == {"objects": 0, "ninja_logs": 1,
                                                                          "ninja_deps": 1}
        _clamp_times(folder, epoch)
    for name in (".ninja_log", ".ninja_deps"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert f"\t{epoch * 10**9}\ta.o\t" in (first / ".ninja_log").read_text()
    deps_after = _ninja_says(ninja, first, "-t", "deps")
    assert "STALE" not in deps_after and _deps_without_times(deps_after) == deps_before

    said = _ninja_says(ninja, first, "-n", "-d", "explain")
    assert "no work to do" in said and "dirty" not in said, said
    os.utime(first / "h.h")   # a header changed after the build: what read it is built again
    said = _ninja_says(ninja, first, "-n", "-d", "explain")
    assert "a.o is dirty" in said and "b.o is dirty" in said, said


def test_records_left_as_written_where_the_build_clamps_no_times(tmp_path: Path) -> None:
    ninja, cc = _ninja(), needs.tool("cc", hint="Debian's gcc")
    _project(tmp_path / "p", cc)
    _ninja_says(ninja, tmp_path / "p", "-j1")
    before = {name: (tmp_path / "p" / name).read_bytes() for name in (".ninja_log", ".ninja_deps")}
    assert repeatable.make_repeatable([str(tmp_path)], None) == {"objects": 0, "ninja_logs": 0, "ninja_deps": 0}
    assert {name: (tmp_path / "p" / name).read_bytes() for name in before} == before


@pytest.mark.parametrize("text", ["", "# ninja log v4\n", "# ninja log v7\n1\t2\tx.o\n", "garbage"])
def test_a_ninja_log_of_another_shape_is_refused_not_rewritten(text: str) -> None:
    with pytest.raises(ValueError, match="ninja log"):
        repeatable.clamp_log(text, 0)


V4 = b"# ninjadeps\n\x04\x00\x00\x00"


@pytest.mark.parametrize("data", [b"", b"# ninjadeps\n\x03\x00\x00\x00", V4 + b"\x08\x00\x00\x00ab", V4 + b"\x01\x00",
                                  V4 + b"\x04\x00\x00\x80abcd", V4 + b"\x00\x00\x00\x00"])
def test_a_ninja_deps_log_of_another_shape_is_refused_not_rewritten(data: bytes) -> None:
    with pytest.raises(ValueError, match="ninja deps"):
        repeatable.clamp_deps(data, 0)
