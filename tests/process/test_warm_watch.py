"""The warm-start watch against real processes: a compiler process seen in /proc, files written by
another process into a baked cache folder (no GPU, no Docker)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from buildscripts.probe import warmcheck
from tests import needs


def test_a_compiler_running_during_the_start_is_seen(tmp_path: Path) -> None:
    if not Path("/proc/self/comm").exists():
        needs.unavailable("/proc", "the watch reads the compiler processes there: Linux")
    sleep = shutil.which("sleep")
    assert sleep
    nvcc = tmp_path / "nvcc"  # /proc/PID/comm is the executable's file name
    shutil.copy(sleep, nvcc)
    (tmp_path / "baked.so").write_bytes(b"baked")
    watch = warmcheck.Watch([str(tmp_path)], interval_s=0.05).start()
    proc = subprocess.Popen([str(nvcc), "1"])
    writer = subprocess.run([sys.executable, "-c", f"open({str(tmp_path / 'new.o')!r}, 'w').write('x')"],
                            check=True)
    assert writer.returncode == 0
    proc.wait(timeout=10)
    time.sleep(0.1)
    result = watch.stop()
    # The watch reads all of /proc, as it should in an image's container; on a shared test machine that also
    # holds other builds' compilers (a cell's jit-compile stage runs nvcc and cicc in its container).
    assert "nvcc" in result["compiler_processes"]
    assert result["compiled_files"] == [str(tmp_path / "new.o")]
    why = warmcheck.verdict(result)
    assert why is not None and "compiler processes ran: " in why and "nvcc" in why.split("compiler processes ran: ")[1]
