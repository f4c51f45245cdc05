"""The probe reads other processes' names from /proc while a server runs (is its process group still alive, is a
CUDA compiler running): a process of any user may have any name, UTF-8 or not, and the probe must read on past it.
A name with byte 0xff once failed the server stage with a UnicodeDecodeError whenever such a process ran beside it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.probe import server, warmcheck

ODD_NAME = b"\xff\xfe\x80-not-utf8"


@pytest.fixture
def odd_process() -> Iterator[int]:
    """A process of its own group that renamed itself ODD_NAME (prctl PR_SET_NAME), running meanwhile."""
    code = f"import ctypes, time; ctypes.CDLL(None).prctl(15, ctypes.c_char_p({ODD_NAME!r}), 0, 0, 0); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/comm").read_bytes().strip() != ODD_NAME[:15]:
            assert time.monotonic() < deadline, "the child did not rename itself"
            time.sleep(0.05)
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_process_with_a_name_of_any_bytes_is_read_past(odd_process: int) -> None:
    assert server._member_alive(str(odd_process), os.getpgid(odd_process))
    assert server._group_alive(os.getpgid(odd_process))
    assert server._group_alive(os.getpgid(os.getpid()))   # this test's own group: every process's stat is read
    found, own = warmcheck.compiler_processes(os.getsid(0))
    assert isinstance(found, set) and isinstance(own, set)
