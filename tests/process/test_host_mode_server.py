"""The real probe in host mode, its GPU stages run against a CPU stand-in (tests/cpu_stand_in: torch that
reports an H200, a server with SGLang's API) and judged by the host: the probe starts the server and hands
it over, the host (this process) polls readiness through the port, sends the first generation and compares
the tokens with its own reference decode, then tells the probe to stop. Where this process can join
network namespaces (root), the server runs with no route out and the host reaches it from inside."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest

from buildscripts.results import StageResult, Status
from buildscripts.verify import host_model, netns
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.host import HostRunner
from buildscripts.verify.plan import Plan
from buildscripts.verify.runner import Options, verify
from tests import needs

STAND_IN = Path(__file__).resolve().parents[1] / "cpu_stand_in"
H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)
PLAN = Plan.make(archs=["sm_90a"], lane_cuda=None, stages=["gpu-visible", "server", "first-generation"],
                 stage_timeout=60)


@functools.cache
def model() -> host_model.TinyModel:
    """The tests' tiny model, made when a test first asks (not at collection, where every worker would make it
    for files it never runs), of a seed whose first draw has clear margins: seed 5150 took 262 draws, 2.6 s."""
    return host_model.make(seed=92)


def run_host(tmp_path: Path, answer: list[int], monkeypatch: pytest.MonkeyPatch,
             plan: Plan = PLAN) -> dict[str, StageResult]:
    try:
        import tokenizers  # noqa: F401 - the probe makes the tiny model's tokenizer with it, as in an image
    except ImportError:
        needs.unavailable("the tokenizers package", "pip install -e '.[test]'")
    made = model()
    monkeypatch.setattr(host_model, "make", lambda model="llama": made)   # this model's tokens, known to the stand-in
    env = {"PYTHONPATH": str(STAND_IN), "PATH": f"{STAND_IN / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "SGLANG_TEST_OUTPUT_IDS": json.dumps(answer)}
    stages = verify(HostRunner(sys.executable, env, tmp_path / "work"),
                    Options(plan=plan, log_file=tmp_path / "probe.log", handed=Handed((H200,))))
    return {s.name: s for s in stages}


def test_the_host_passes_a_server_that_answers_its_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = run_host(tmp_path, list(model().reference.output_ids), monkeypatch)
    assert [s.status for s in found.values()] == [Status.PASSED] * 3, found
    server, generation = found["server"].evidence, found["first-generation"].evidence
    assert server["observed_by"] == "host" and server["seconds_to_ready"] >= 1.0
    assert generation["reference"]["verdict"] == "all 16 tokens equal" and generation["shutdown"]["clean"]
    assert {s.where for s in found.values()} == {"host: NVIDIA H200 (sm_90)"}
    log = (tmp_path / "probe.log").read_text()
    assert "@@probe-serve " in log and "@@probe-result " in log
    assert not (tmp_path / "work" / "stop").exists()   # the probe took the host's stop
    if netns.problem() is None:
        assert server["network"]["cut"] is True and "inside the network namespace" in server["endpoint"]
    else:
        assert server["network"]["cut"] is False and "could not be cut" in server["warning"]


def test_other_tokens_fail_the_first_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = [(t + 1) % 512 for t in model().reference.output_ids]
    found = run_host(tmp_path, wrong, monkeypatch)
    assert found["server"].status is Status.PASSED
    generation = found["first-generation"]
    assert generation.status is Status.FAILED and generation.failure_class == "generation-mismatch"
    assert "GPU token 0 is" in (generation.reason or "")


def test_a_failed_kernel_smoke_stops_the_server_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in's torch has no C++ extension support, so kernel-smoke fails; the server, started beside it,
    is stopped at once and the host records it as aborted (not failed, not observed as passed)."""
    plan = Plan.make(archs=["sm_90a"], lane_cuda=None, stages=["gpu-visible", "kernel-smoke", "server",
                                                               "first-generation"], stage_timeout=60)
    found = run_host(tmp_path, list(model().reference.output_ids), monkeypatch, plan)
    assert [s.status for s in found.values()] == [Status.PASSED, Status.FAILED, Status.ABORTED, Status.ABORTED]
    server = found["server"]
    assert "a GPU check beside it failed" in (server.reason or "")
    assert server.evidence["started_beside"] == "kernel-smoke" and server.evidence["observed_by"] == "host"
    assert "@@probe-server-exit " in (tmp_path / "probe.log").read_text()   # the host stopped polling at once
