"""The host's own observation of a server (verify/handoff.py, observe.py, served.py) against a real local
process over real HTTP: tests/process/fake_server.py in its `sglang` mode answers SGLang's API with the
token ids it is told to, so the host's verdict is what is under test (a server that answers the
reference passes, one that answers other tokens or dies fails), and, where this process can join network
namespaces (root), the same server started with no route out (probe/netcut.py), reached from inside."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.probe import core, server
from buildscripts.results import StageResult, Status
from buildscripts.verify import claims, host, host_model, netns, served
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.handoff import Handoff, Handover, Observation, Unreachable
from buildscripts.verify.host import ProcessReach
from buildscripts.verify.observe import Endpoint
from tests import needs

FAKE = str(Path(__file__).with_name("fake_server.py"))
NETCUT = str(Path(server.__file__).with_name("netcut.py"))
H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)


@functools.cache
def model() -> host_model.TinyModel:
    """The tests' tiny model, made when a test first asks (not at collection, where every worker would make it
    for files it never runs)."""
    return host_model.make(seed=20261201)


class Local:
    """Reach for a server on this machine's loopback (or in a namespace): records the stop."""

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace, self.stopped = namespace, 0

    def endpoint(self, handover: Handover) -> Endpoint:
        return Endpoint("127.0.0.1", handover.port, self.namespace)

    def stop(self, handover: Handover) -> None:
        self.stopped += 1


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def go(mode: str, ids: list[int], *, cut: bool = False) -> tuple[int, subprocess.Popen[bytes]]:
        port = server.free_port()
        argv = [sys.executable, FAKE, mode, str(port)]
        found = subprocess.Popen([sys.executable, NETCUT, "--", *argv] if cut else argv, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.STDOUT, env={**os.environ, "SGLANG_TEST_OUTPUT_IDS": json.dumps(ids),
                                                                "HV_MARK": "this-run"})
        started.append(found)
        return port, found

    yield go
    for proc in started:
        proc.kill()
        proc.wait()


def serve_line(port: int, pid: int = 4242) -> str:
    return core.SERVE_PREFIX + json.dumps({"port": port, "pid": pid, "host": "127.0.0.1", "stop_file": "/x/stop",
                                           "log": "server.log"})


def observe(reach: Local, port: int, *, handed: Handed | None = None, deadline: float = 30,
            after: str | None = None) -> Observation:
    handoff = Handoff(reach, handed or Handed((H200,)), model(), ready_deadline_s=deadline)
    assert handoff.feed(serve_line(port))
    if after:
        time.sleep(0.5)
        handoff.feed(after)
    while handoff.busy:
        time.sleep(0.1)
    found = handoff.finish()
    assert found is not None and reach.stopped == 1   # the probe is told to stop whatever happened
    return found


def probe_said(status: Status = Status.PASSED) -> list[StageResult]:
    """The real probe's report: gpu-visible on the GPU, the server alive until the host said stop."""
    gpu = {"gpu": "NVIDIA H200", "arch": "sm_90", "where": "host (gpu)"}
    return [StageResult(name="gpu-visible", status=Status.PASSED, evidence={"uuid": H200.uuid}, **gpu),
            StageResult(name="server", status=status, evidence={"argv": ["-m", "sglang.launch_server"],
                        "shutdown": {"clean": True}, "log_tail": "last lines"}, **gpu),
            StageResult(name="first-generation", status=Status.SKIPPED, reason="made by the host", **gpu)]


def judged(seen: Observation | None, status: Status = Status.PASSED) -> dict[str, StageResult]:
    stages = claims.backed(served.merge(probe_said(status), seen, model()), Handed((H200,)), "host")
    return {s.name: s for s in stages}


def test_a_server_that_answers_the_reference_passes_as_the_host_saw_it(fake) -> None:  # type: ignore[no-untyped-def]
    port, _ = fake("sglang", list(model().reference.output_ids))
    seen = observe(Local(), port)
    assert seen.readiness is not None and seen.readiness.ready and seen.problem is None
    assert seen.readiness.seconds_to_ready is not None and seen.readiness.seconds_to_ready >= 1.0
    assert seen.network["cut"] is False and "warning" in seen.network   # loopback of this machine: not cut
    found = judged(seen)
    assert found["server"].status is Status.PASSED and found["server"].evidence["observed_by"] == "host"
    assert "network could not be cut" in found["server"].evidence["warning"]
    generation = found["first-generation"]
    assert generation.status is Status.PASSED and generation.where == "host: NVIDIA H200 (sm_90)"
    assert generation.evidence["generate"]["output_ids"] == list(model().reference.output_ids)
    assert generation.evidence["model"]["seed"] == model().seed and generation.evidence["chat"]["usage"]


def test_other_tokens_fail_the_first_generation_with_the_position(fake) -> None:  # type: ignore[no-untyped-def]
    wrong = list(model().reference.output_ids)
    wrong[5] = (wrong[5] + 1) % 512
    port, _ = fake("sglang", wrong)
    found = judged(observe(Local(), port))
    assert found["server"].status is Status.PASSED
    generation = found["first-generation"]
    assert generation.status is Status.FAILED and generation.failure_class == "generation-mismatch"
    assert "GPU token 5 is" in (generation.reason or "")


def test_a_server_that_dies_ends_the_polling_at_once(fake) -> None:  # type: ignore[no-untyped-def]
    port, _ = fake("crash", [])
    started = time.monotonic()
    seen = observe(Local(), port, deadline=120, after=core.SERVER_EXIT_PREFIX + '{"code": 1}')
    assert time.monotonic() - started < 30
    assert seen.readiness is not None and not seen.readiness.ready and seen.readiness.exit_code == 1
    found = judged(seen, Status.FAILED)   # the probe reports the exit with the server's traceback
    assert found["server"].status is Status.FAILED and found["first-generation"].status is Status.ABORTED


def test_a_server_that_never_answers_times_out_with_the_url(fake) -> None:  # type: ignore[no-untyped-def]
    port, _ = fake("hang", [])
    found = judged(observe(Local(), port, deadline=1.5))   # a deadline, not a wait: short is enough
    server_stage = found["server"]
    assert server_stage.status is Status.FAILED and server_stage.failure_class == "readiness-timeout"
    assert f"http://127.0.0.1:{port}" in (server_stage.reason or "")
    assert server_stage.log_excerpt == "last lines"   # the probe's tail of the server log


def test_without_a_handed_gpu_the_host_does_not_even_look() -> None:
    seen = observe(Local(), 9, handed=Handed(why_none="no GPU requested for this container"))
    assert seen.readiness is None and seen.refused_class == "gpu-claim-unbacked"


def test_a_pid_without_this_verifications_marker_is_not_reached(fake, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(host, "FIND_S", 0.5)
    port, proc = fake("sglang", [])
    reach: ProcessReach = ProcessReach("HV_MARK=another-run", lambda handover: None, enter=False)
    with pytest.raises(Unreachable, match="no process"):
        reach.endpoint(Handover.parse(serve_line(port, proc.pid)))  # type: ignore[arg-type]
    found = ProcessReach("HV_MARK=this-run", lambda handover: None, enter=False).endpoint(
        Handover.parse(serve_line(port, proc.pid)))  # type: ignore[arg-type]
    assert found == Endpoint("127.0.0.1", port)


def test_a_server_whose_environment_shows_late_is_still_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process read while it execs (netcut turning into the server) shows no environment for a moment."""
    answers = iter([None, None, 4321])
    monkeypatch.setattr(netns, "host_pid", lambda inner, mark, uid=None: next(answers))
    found = ProcessReach("HV_MARK=this-run", lambda handover: None, enter=False).endpoint(
        Handover.parse(serve_line(8000, 77)))  # type: ignore[arg-type]
    assert found == Endpoint("127.0.0.1", 8000)
    assert next(answers, "all asked") == "all asked"


def test_a_server_never_found_is_unreachable_once_the_host_stops_looking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "FIND_S", 0.5)
    monkeypatch.setattr(netns, "host_pid", lambda inner, mark, uid=None: None)
    started = time.monotonic()
    with pytest.raises(Unreachable, match="no process 77"):
        ProcessReach("HV_MARK=this-run", lambda handover: None, enter=False).endpoint(
            Handover.parse(serve_line(8000, 77)))  # type: ignore[arg-type]
    assert 0.5 <= time.monotonic() - started < 5   # looked for the while it may take, then stopped


def test_a_server_with_no_route_out_is_reached_from_inside_its_namespace(fake) -> None:  # type: ignore[no-untyped-def]
    problem = netns.problem()
    if problem is not None:
        needs.unavailable("joining network namespaces", f"{problem}; CI runs the tests as root")
    port, proc = fake("sglang", list(model().reference.output_ids), cut=True)
    time.sleep(1.5)
    assert not netns.same_as_ours(netns.of_process(proc.pid))
    assert Endpoint("127.0.0.1", port).request("/health_generate", timeout=2)[0] is None  # not from outside
    reach = ProcessReach("HV_MARK=this-run", lambda handover: None, enter=True)
    endpoint = reach.endpoint(Handover.parse(serve_line(port, proc.pid)))  # type: ignore[arg-type]
    assert endpoint.netns == netns.of_process(proc.pid)
    seen = observe(Local(endpoint.netns), port)
    assert seen.network["cut"] is True and seen.network["detail"] == "no route out of the server's network namespace"
    assert judged(seen)["first-generation"].status is Status.PASSED
