"""The probe's compiles side by side (probe/core.py `side_by_side`): results by name in the jobs' order, at most
`most` at a time, and a job's exception raised once every job has ended (none is left running)."""

from __future__ import annotations

import threading
import time

import pytest

from buildscripts.probe import core


def test_results_come_back_by_name_in_the_jobs_order() -> None:
    def slow() -> str:
        time.sleep(0.2)
        return "a"

    done = core.side_by_side({"slow": slow, "fast": lambda: "b"})
    assert list(done.items()) == [("slow", "a"), ("fast", "b")]
    assert core.side_by_side({}) == {}


def test_at_most_most_jobs_run_at_once() -> None:
    running, peak, lock = [0], [0], threading.Lock()

    def job() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    core.side_by_side({str(i): job for i in range(6)}, most=2)
    assert peak[0] == 2
    core.side_by_side({str(i): job for i in range(4)})   # all at once by default
    assert peak[0] == 4


def test_a_failed_job_is_raised_after_the_others_ended() -> None:
    ended: list[str] = []

    def fails() -> None:
        raise core.StageFailed("timed out after 1s: nvcc")

    def slow() -> None:
        time.sleep(0.3)
        ended.append("slow")

    with pytest.raises(core.StageFailed, match="timed out"):
        core.side_by_side({"fails": fails, "slow": slow})
    assert ended == ["slow"]
