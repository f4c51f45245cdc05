"""tests/disk_room.py: the disk-heavy tests reserve their room, wait while others' reservations leave too little,
fail when there is too little and nobody else holds any, and never count a reservation whose holder is gone.

Every wait here has a deadline of seconds, so that a wrong rule fails a test instead of hanging it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.disk_room import disk_room
from tests.peak import Peak

GB = 10**9


@contextlib.contextmanager
def another(ledger: Path, tmp_path: Path, nbytes: int, *, device: int | None = None,
            alive: bool = True) -> Iterator[None]:
    """A reservation of `nbytes` by another test: its holder keeps its lock file locked while the body runs (or,
    `alive` False, has gone and left its entry behind)."""
    token = uuid.uuid4().hex
    entry = {"holder": token, "pid": os.getpid(), "bytes": nbytes, "what": "another test",
             "device": os.stat(tmp_path).st_dev if device is None else device}
    ledger.write_text(json.dumps({f"{token}.x": entry}))
    with ledger.with_name(f"{ledger.name}.{token}.lock").open("w") as holder:
        if alive:
            fcntl.flock(holder, fcntl.LOCK_EX)
        yield


def enter(ledger: Path, tmp_path: Path, need: int, free: int, deadline: float = 5) -> list[str]:
    """The reservations the ledger holds inside the body (their `what`), for a disk with `free` bytes free."""
    with disk_room(need, "this test", [tmp_path], lambda: "free something", ledger=ledger, free=lambda _: free,
                   poll=0.01, deadline=deadline, reclaim=lambda: None):
        return sorted(r["what"] for r in json.loads(ledger.read_text()).values())


def test_a_reservation_holds_while_the_body_runs_and_goes_after(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    assert enter(ledger, tmp_path, 20 * GB, 100 * GB) == ["this test"]
    assert json.loads(ledger.read_text()) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json", "ledger.lock"]   # no holder file left


def test_room_beside_another_reservation_does_not_wait(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    with another(ledger, tmp_path, 15 * GB):
        assert enter(ledger, tmp_path, 20 * GB, 35 * GB) == ["another test", "this test"]
        assert [r["what"] for r in json.loads(ledger.read_text()).values()] == ["another test"]


def test_too_little_beside_another_reservation_waits_until_its_holder_ends(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    released = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with another(ledger, tmp_path, 15 * GB):
            holding.set()
            time.sleep(0.3)
            released.set()

    threading.Thread(target=hold).start()
    holding.wait()
    assert enter(ledger, tmp_path, 20 * GB, 34 * GB) == ["this test"]
    assert released.is_set()


def test_too_little_alone_fails_with_what_to_free(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        enter(tmp_path / "ledger.json", tmp_path, 20 * GB, 19 * GB)
    assert str(failed.value) == (f"this test needs about 20 GB free under {tmp_path}, there are 19.0 GB; "
                                 "free something")


def test_a_wait_past_its_deadline_fails_with_whom_it_waited_for(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    with another(ledger, tmp_path, 15 * GB), pytest.raises(pytest.fail.Exception) as failed:
        enter(ledger, tmp_path, 20 * GB, 34 * GB, deadline=0.05)
    assert "waited 0 s for 20 GB beside the reservations of: another test" in str(failed.value)


@pytest.mark.parametrize("holder", ["gone", "another file system"])
def test_a_reservation_of_a_gone_holder_or_another_file_system_does_not_count(tmp_path: Path, holder: str) -> None:
    ledger = tmp_path / "ledger.json"
    other = {"alive": False} if holder == "gone" else {"device": os.stat(tmp_path).st_dev + 1}
    with another(ledger, tmp_path, 90 * GB, **other):
        assert "this test" in enter(ledger, tmp_path, 20 * GB, 30 * GB)


@pytest.mark.parametrize("text", ['{"other": {"holder": "x", "byt', '{"other": {"holder": "../../x", "bytes": 1}}',
                                  '["not", "a", "ledger"]'])
def test_a_ledger_cut_short_or_malformed_is_read_as_empty(tmp_path: Path, text: str) -> None:
    ledger = tmp_path / "ledger.json"
    ledger.write_text(text)
    assert enter(ledger, tmp_path, 20 * GB, 30 * GB) == ["this test"]


def test_two_that_do_not_fit_together_are_never_inside_together(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    peak = Peak()

    def slow_free(_: Path) -> int:
        time.sleep(0.02)   # widens the window between reading the ledger and writing it back
        return 30 * GB

    def one() -> None:
        with disk_room(20 * GB, "a test", [tmp_path], lambda: "", ledger=ledger, free=slow_free, poll=0.01,
                       reclaim=lambda: None, deadline=10):
            peak.stay(0.05)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak.most == 1


def test_a_body_that_fails_gives_its_room_back(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    with pytest.raises(RuntimeError), disk_room(20 * GB, "this test", [tmp_path], lambda: "", ledger=ledger,
                                                reclaim=lambda: None, free=lambda _: 30 * GB):
        raise RuntimeError
    assert json.loads(ledger.read_text()) == {}


def test_short_of_room_with_nobody_else_the_unheld_build_cache_is_reclaimed_once(tmp_path: Path) -> None:
    """Right after `nox -s build` (the README's two commands back to back), the cache no image holds is room."""
    ledger, calls, free = tmp_path / "ledger.json", [], [10 * GB]

    def reclaim() -> None:
        calls.append("pruned")
        free[0] = 40 * GB

    with disk_room(20 * GB, "this test", [tmp_path], lambda: "", ledger=ledger, free=lambda _: free[0], poll=0.01,
                   deadline=5, reclaim=reclaim):
        assert calls == ["pruned"]
    calls.clear()
    free[0] = 10 * GB
    with pytest.raises(pytest.fail.Exception, match="needs about 20 GB"), disk_room(
            20 * GB, "this test", [tmp_path], lambda: "", ledger=ledger, free=lambda _: 10 * GB, poll=0.01,
            deadline=5, reclaim=lambda: calls.append("pruned")):
        pass
    assert calls == ["pruned"]   # once, then the clear failure
