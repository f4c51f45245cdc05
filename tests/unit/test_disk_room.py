"""tests/disk_room.py: the disk-heavy tests reserve their room, wait while others' reservations leave too little,
and fail at once when there would be too little even alone."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.disk_room import disk_room

GB = 10**9
DEAD_PID = 2**22 + 1   # above Linux's largest pid_max: no process has it


def hold(ledger: Path, tmp_path: Path, nbytes: int, *, pid: int | None = None, device: int | None = None) -> None:
    entry = {"pid": os.getpid() if pid is None else pid, "bytes": nbytes, "what": "another test",
             "device": os.stat(tmp_path).st_dev if device is None else device}
    ledger.write_text(json.dumps({"other": entry}))


def enter(ledger: Path, tmp_path: Path, need: int, free: int) -> list[str]:
    """The reservations the ledger holds inside the body (their `what`), for a disk with `free` bytes free."""
    with disk_room(need, "this test", tmp_path, lambda: "free something", ledger=ledger, free=lambda _: free,
                   poll=0.01):
        return sorted(r["what"] for r in json.loads(ledger.read_text()).values())


def test_a_reservation_holds_while_the_body_runs_and_goes_after(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    assert enter(ledger, tmp_path, 20 * GB, 100 * GB) == ["this test"]
    assert json.loads(ledger.read_text()) == {}


def test_room_beside_another_reservation_does_not_wait(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    hold(ledger, tmp_path, 15 * GB)
    assert enter(ledger, tmp_path, 20 * GB, 35 * GB) == ["another test", "this test"]
    assert list(json.loads(ledger.read_text())) == ["other"]


def test_too_little_beside_another_reservation_waits_until_it_goes(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    hold(ledger, tmp_path, 15 * GB)
    released = threading.Event()

    def release() -> None:
        time.sleep(0.2)
        ledger.write_text("{}")
        released.set()

    threading.Thread(target=release).start()
    assert enter(ledger, tmp_path, 20 * GB, 34 * GB) == ["this test"]
    assert released.is_set()


def test_too_little_alone_fails_at_once_with_what_to_free(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        enter(tmp_path / "ledger.json", tmp_path, 20 * GB, 19 * GB)
    assert str(failed.value) == (f"this test needs about 20 GB free under {tmp_path}, there are 19.0 GB; "
                                 "free something")


@pytest.mark.parametrize("holder", ["a process that is gone", "another file system"])
def test_a_reservation_of_a_gone_process_or_another_file_system_does_not_count(tmp_path: Path, holder: str) -> None:
    ledger = tmp_path / "ledger.json"
    if holder == "a process that is gone":
        hold(ledger, tmp_path, 90 * GB, pid=DEAD_PID)
    else:
        hold(ledger, tmp_path, 90 * GB, device=os.stat(tmp_path).st_dev + 1)
    inside = enter(ledger, tmp_path, 20 * GB, 30 * GB)
    assert "this test" in inside


def test_a_ledger_cut_short_is_read_as_empty(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    ledger.write_text('{"other": {"pid": 1, "byt')
    assert enter(ledger, tmp_path, 20 * GB, 30 * GB) == ["this test"]


def test_a_body_that_fails_gives_its_room_back(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    with pytest.raises(RuntimeError), disk_room(20 * GB, "this test", tmp_path, lambda: "", ledger=ledger,
                                                free=lambda _: 30 * GB):
        raise RuntimeError
    assert json.loads(ledger.read_text()) == {}
