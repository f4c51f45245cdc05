"""Readiness, failure excerpts and clean stops, against real local processes over real HTTP.

No Docker and no GPU needed: tests/fake_server.py plays a server that starts slowly, crashes with
a traceback, hangs, answers 503 before 200, or dies after answering.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.probe import server

FAKE = str(Path(__file__).with_name("fake_server.py"))
# How long the fake server takes to listen, crash or die: long enough for several polls at POLL_S, short
# enough that the tier does not sleep for nothing.
DELAY_S = 0.6
POLL_S = 0.1


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[object]:
    started: list[server.Server] = []

    def go(mode: str) -> server.Server:
        port = server.free_port()
        srv = server.start([sys.executable, FAKE, mode, str(port), str(DELAY_S)], port, str(tmp_path / f"{mode}.log"))
        started.append(srv)
        return srv

    yield go
    for srv in started:  # whatever a failing test left running
        server.stop(srv, grace_s=2)


def test_slow_start_becomes_ready_after_http_comes_up(launch) -> None:  # type: ignore[no-untyped-def]
    srv = launch("slow")
    ready = server.wait_ready(srv, "/health_generate", deadline_s=30, interval_s=POLL_S)
    assert ready.ready and not ready.timed_out
    assert ready.seconds_to_http is not None and ready.seconds_to_http >= DELAY_S
    assert ready.seconds_to_ready == ready.seconds_to_http
    assert server.stop(srv)["clean"]


def test_503_then_200_records_http_up_before_ready(launch) -> None:  # type: ignore[no-untyped-def]
    srv = launch("flaky")
    ready = server.wait_ready(srv, "/health_generate", deadline_s=30, interval_s=POLL_S)
    assert ready.ready
    assert ready.seconds_to_http is not None and ready.seconds_to_ready is not None
    assert ready.seconds_to_ready > ready.seconds_to_http  # three 503s came first
    assert "request /health_generate" in srv.log_tail()


def test_crash_fails_fast_with_the_traceback_cut_out(launch) -> None:  # type: ignore[no-untyped-def]
    srv = launch("crash")
    started = time.monotonic()
    ready = server.wait_ready(srv, "/health_generate", deadline_s=60, interval_s=POLL_S)
    assert not ready.ready and ready.exit_code == 1 and not ready.timed_out
    assert time.monotonic() - started < 20  # did not wait for the deadline
    server.stop(srv)
    trace = server.last_traceback(list(srv.tail))
    assert trace.startswith("Traceback (most recent call last):")
    assert trace.rstrip().endswith("std::filesystem::exists(nvcc_path)")
    assert "load_weights" in trace
    excerpt = server.failure_excerpt(srv)
    assert "--- last log lines ---" in excerpt and "fake server crash" in excerpt
    assert Path(srv.log_path).read_text().count("RuntimeError: ") == 1


def test_hang_times_out_at_the_deadline(launch) -> None:  # type: ignore[no-untyped-def]
    srv = launch("hang")
    ready = server.wait_ready(srv, "/health_generate", deadline_s=1.5, interval_s=POLL_S, request_timeout_s=0.5)
    assert ready.timed_out and not ready.ready and ready.exit_code is None
    assert 1.5 <= ready.waited_s < 5
    assert ready.seconds_to_http is None  # nothing ever answered
    report = server.stop(srv, grace_s=3)
    assert report["clean"] and report["signal"] == "SIGTERM"


def test_death_after_http_up_is_reported_as_an_exit(launch) -> None:  # type: ignore[no-untyped-def]
    srv = launch("die-later")
    ready = server.wait_ready(srv, "/health_generate", deadline_s=30, interval_s=POLL_S)
    assert not ready.ready and ready.exit_code == 3
    assert ready.seconds_to_http is not None
    assert ready.last_answer is not None and ready.last_answer.startswith("503")


def test_stop_removes_the_whole_process_group_and_frees_the_port(launch) -> None:  # type: ignore[no-untyped-def]
    srv = launch("forks")
    assert server.wait_ready(srv, "/health", deadline_s=30, interval_s=POLL_S).ready
    assert server.port_open(srv.port)
    report = server.stop(srv, grace_s=5)
    assert report == {**report, "clean": True, "processes_left": False, "port_still_open": False}
    assert not server.port_open(srv.port)
