"""The probe's compiles side by side (probe/core.py `side_by_side`): results by name in the jobs' order, at most
`most` at a time, and a job's exception raised once every job has ended (none is left running)."""

from __future__ import annotations

import time

import pytest

from buildscripts.probe import core
from tests.peak import Peak


def test_results_come_back_by_name_in_the_jobs_order() -> None:
    def slow() -> str:
        time.sleep(0.2)
        return "a"

    done = core.side_by_side({"slow": slow, "fast": lambda: "b"})
    assert list(done.items()) == [("slow", "a"), ("fast", "b")]
    assert core.side_by_side({}) == {}


def test_at_most_most_jobs_run_at_once() -> None:
    peak = Peak()
    core.side_by_side({str(i): lambda: peak.stay(0.05) for i in range(6)}, most=2)
    assert peak.most == 2
    core.side_by_side({str(i): lambda: peak.stay(0.05) for i in range(4)})   # all at once by default
    assert peak.most == 4


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
