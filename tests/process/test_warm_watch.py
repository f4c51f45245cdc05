"""The warm-start watch against real processes: a compiler process seen in /proc, files written by
another process into a baked cache folder (no GPU, no Docker)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from buildscripts.probe import warmcheck
from tests import needs


def _fake_compiler(tmp_path: Path, name: str) -> Path:
    sleep = shutil.which("sleep")
    assert sleep
    fake = tmp_path / name  # /proc/PID/comm is the executable's file name
    shutil.copy(sleep, fake)
    return fake


def _needs_proc() -> None:
    if not Path("/proc/self/comm").exists():
        needs.unavailable("/proc", "the watch reads the compiler processes there: Linux")


@pytest.fixture
def own_compiler(monkeypatch: pytest.MonkeyPatch) -> str:
    """A compiler name no other process on this machine has: builds and tests beside this one run the real nvcc and
    cicc in their containers, which the watch rightly counts."""
    name = f"cc-{uuid.uuid4().hex[:8]}"   # /proc/PID/comm keeps 15 bytes
    monkeypatch.setattr(warmcheck, "COMPILERS", {*warmcheck.COMPILERS, name})
    return name


def test_a_compiler_running_during_the_start_is_seen(tmp_path: Path) -> None:
    _needs_proc()
    nvcc = _fake_compiler(tmp_path, "nvcc")
    (tmp_path / "baked.so").write_bytes(b"baked")
    watch = warmcheck.Watch([str(tmp_path)], interval_s=0.05).start()
    proc = subprocess.Popen([str(nvcc), "1"], start_new_session=True)   # as server.start starts the server
    writer = subprocess.run([sys.executable, "-c", f"open({str(tmp_path / 'new.o')!r}, 'w').write('x')"],
                            check=True)
    assert writer.returncode == 0
    proc.wait(timeout=10)
    time.sleep(0.1)
    result = watch.stop()
    # The watch reads all of /proc outside its own session, as it should in an image's container; on a shared
    # test machine that also holds other builds' compilers (a cell's jit-compile stage runs nvcc and cicc there).
    assert "nvcc" in result["compiler_processes"]
    assert result["compiled_files"] == [str(tmp_path / "new.o")]
    why = warmcheck.verdict(result)
    assert why is not None and "compiler processes ran: " in why and "nvcc" in why.split("compiler processes ran: ")[1]


def test_the_probes_own_compiles_beside_the_server_are_not_the_servers(tmp_path: Path, own_compiler: str) -> None:
    """kernel-smoke JIT-compiles in the probe's session while the server starts beside it: those compilers are
    kept apart, and a start that compiled nothing itself stays warm."""
    _needs_proc()
    cicc = _fake_compiler(tmp_path, own_compiler)
    (tmp_path / "baked.so").write_bytes(b"baked")
    watch = warmcheck.Watch([str(tmp_path)], interval_s=0.05).start()
    proc = subprocess.Popen([str(cicc), "0.5"])          # this process's session: a stage of the probe's own
    proc.wait(timeout=10)
    time.sleep(0.1)
    result = watch.stop()
    assert own_compiler in result["compiler_processes_beside"]
    assert own_compiler not in result["compiler_processes"]
    why = warmcheck.verdict(result)   # another build's compilers on a shared machine are still counted: not this one
    assert why is None or own_compiler not in why


def test_a_server_cannot_hide_a_compile_by_detaching_it(tmp_path: Path, own_compiler: str) -> None:
    """A server that starts its compiler detached (the parent exits at once, the compiler runs on as an orphan,
    in a session of its own) is still seen: no process can join the probe's session."""
    _needs_proc()
    nvcc = _fake_compiler(tmp_path, own_compiler)
    (tmp_path / "baked.so").write_bytes(b"baked")
    watch = warmcheck.Watch([str(tmp_path)], interval_s=0.05).start()
    detach = (f"import os, subprocess; subprocess.Popen([{str(nvcc)!r}, '1'], start_new_session=True, "
              "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); os._exit(0)")
    subprocess.run([sys.executable, "-c", detach], start_new_session=True, check=True)
    time.sleep(0.5)
    result = watch.stop()
    assert own_compiler in result["compiler_processes"]
    assert own_compiler not in result["compiler_processes_beside"]
