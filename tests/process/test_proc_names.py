"""The probe reads every process of the machine (a server's group left alive, the CUDA compilers running during a
start): a process whose name is not UTF-8, which any program may set, is read and skipped, never a crash of the
stage that reads it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.probe import server, warmcheck

BAD_NAME = b"\xff\xfe-not-utf8"


@pytest.fixture
def odd_process() -> Iterator[subprocess.Popen[bytes]]:
    code = f"import ctypes, time; ctypes.CDLL(None).prctl(15, ctypes.c_char_p({BAD_NAME!r}), 0, 0, 0); time.sleep(60)"
    started = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 10
    while BAD_NAME[:8] not in Path(f"/proc/{started.pid}/comm").read_bytes():
        assert time.monotonic() < deadline, "the process did not take its name"
        time.sleep(0.05)
    yield started
    started.kill()
    started.wait()


def test_a_group_is_found_alive_past_a_process_with_any_name(odd_process: subprocess.Popen[bytes]) -> None:
    assert server._member_alive(str(odd_process.pid), odd_process.pid)
    assert server._group_alive(odd_process.pid)
    odd_process.kill()
    odd_process.wait()
    assert not server._group_alive(odd_process.pid)


def test_the_compiler_watch_reads_past_a_process_with_any_name(odd_process: subprocess.Popen[bytes]) -> None:
    assert odd_process.poll() is None
    assert isinstance(warmcheck.compiler_processes(), set)
