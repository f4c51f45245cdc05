"""The server runs beside the GPU checks before it (probe/core.py run_all): with one GPU it starts when
kernel-smoke does; the results still come in the order the host accepts, each with its own time; a failed
check stops the server (aborted), a failed server lets the checks finish. Stand-in stages, the real scheduler."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from buildscripts.probe import core, serving, warmcheck

PLANNED = ["gpu-visible", "kernel-smoke", "nccl-allreduce", "server", "first-generation"]


class Stages:
    """Stand-in stages for `core.REGISTRY`: each records when it started and ended; the server waits for the
    halt (as probe/serving.py does) or for its own time."""

    def __init__(self, *, smoke_fails: bool = False, server_fails: bool = False, gpus: int = 1) -> None:
        self.smoke_fails, self.server_fails, self.gpus = smoke_fails, server_fails, gpus
        self.spans: dict[str, tuple[float, float]] = {}

    def timed(self, name: str, body: Any) -> core.StageFunc:
        def run(ctx: core.Context) -> dict[str, Any]:
            started = time.monotonic()
            try:
                return body(ctx) or {}
            finally:
                self.spans[name] = (started, time.monotonic())
        return run

    def visible(self, ctx: core.Context) -> dict[str, Any]:
        ctx.gpu = {"name": "NVIDIA H200", "arch": "sm_90", "count": self.gpus}
        return {}

    def smoke(self, ctx: core.Context) -> dict[str, Any]:
        time.sleep(0.4)
        if self.smoke_fails:
            raise core.StageFailed("kernel-smoke: deep_gemm: CUDA_HOME is not set")
        return {}

    def server(self, ctx: core.Context) -> dict[str, Any]:
        if self.server_fails:
            time.sleep(0.1)
            raise core.StageFailed("server process exited with code 1")
        if ctx.halt.wait(1.0):
            raise core.StageStopped("stopped: a GPU check beside it failed")
        return {"ready": True}

    def registry(self) -> dict[str, core.Stage]:
        def nothing(ctx: core.Context) -> dict[str, Any]:
            return {}
        bodies = {"gpu-visible": self.visible, "kernel-smoke": self.smoke, "nccl-allreduce": nothing,
                  "server": self.server, "first-generation": nothing}
        needs = {"kernel-smoke": ("gpu-visible",), "nccl-allreduce": ("gpu-visible",), "server": ("gpu-visible",),
                 "first-generation": ("server",)}
        return {n: core.Stage(n, self.timed(n, b), needs.get(n, ()), gpu=n != "gpu-visible") for n, b in bodies.items()}


def run(stages: Stages, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        planned: list[str] = PLANNED) -> tuple[dict[str, dict[str, Any]], list[str]]:
    monkeypatch.setattr(core, "REGISTRY", stages.registry())
    results = core.run_all(core.Context(archs=["sm_90a"], mode="host"), planned)
    printed = [json.loads(line[len(core.RESULT_PREFIX):])["name"] for line in capsys.readouterr().out.splitlines()
               if line.startswith(core.RESULT_PREFIX)]
    return {r["name"]: r for r in results}, printed


def overlap(stages: Stages, a: str, b: str) -> bool:
    (a0, a1), (b0, b1) = stages.spans[a], stages.spans[b]
    return a0 < b1 and b0 < a1


def test_with_one_gpu_the_server_starts_with_kernel_smoke_and_results_keep_their_order(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stages = Stages()
    found, printed = run(stages, monkeypatch, capsys)
    assert printed == PLANNED                       # the order the host accepts, whatever finished first
    assert [found[n]["status"] for n in PLANNED] == [core.PASSED] * 5
    assert overlap(stages, "kernel-smoke", "server")
    assert found["server"]["evidence"]["started_beside"] == "kernel-smoke"
    assert found["server"]["duration_s"] >= 0.9 and found["kernel-smoke"]["duration_s"] < 0.9  # each its own time


def test_without_kernel_smoke_the_server_starts_with_the_all_reduce(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    planned = ["gpu-visible", "nccl-allreduce", "server", "first-generation"]
    found, printed = run(Stages(), monkeypatch, capsys, planned)
    assert printed == planned and found["server"]["evidence"]["started_beside"] == "nccl-allreduce"


def test_a_failed_check_stops_the_server_which_is_aborted_not_failed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stages = Stages(smoke_fails=True)
    started = time.monotonic()
    found, printed = run(stages, monkeypatch, capsys)
    assert printed == PLANNED
    assert found["kernel-smoke"]["status"] == core.FAILED
    assert found["server"]["status"] == core.ABORTED and "beside it failed" in found["server"]["reason"]
    assert found["first-generation"]["status"] == core.ABORTED
    assert stages.spans["server"][1] - started < 0.9     # it did not wait out its own time


def test_a_failed_server_lets_the_checks_finish_so_the_first_failure_stays_theirs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stages = Stages(smoke_fails=True, server_fails=True)
    found, _ = run(stages, monkeypatch, capsys)
    first = next(n for n in PLANNED if found[n]["status"] == core.FAILED)
    assert first == "kernel-smoke" and found["kernel-smoke"]["duration_s"] >= 0.4
    assert found["server"]["status"] == core.FAILED          # its own failure, recorded, not overwritten


def test_with_several_gpus_the_stages_run_one_after_the_other(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stages = Stages(gpus=2)
    found, printed = run(stages, monkeypatch, capsys)
    assert printed == PLANNED and not overlap(stages, "kernel-smoke", "server")
    assert "started_beside" not in found["server"]["evidence"]


def test_no_gpu_no_thread_and_every_gpu_stage_skipped(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    stages = Stages()
    registry = stages.registry()

    def none(ctx: core.Context) -> dict[str, Any]:
        raise core.StageSkipped("no GPU visible")
    registry["gpu-visible"] = core.Stage("gpu-visible", none)
    monkeypatch.setattr(core, "REGISTRY", registry)
    before = threading.active_count()
    results = core.run_all(core.Context(archs=["sm_90a"]), PLANNED)
    assert [r["status"] for r in results] == [core.SKIPPED] * 5 and threading.active_count() == before


def test_the_servers_warm_start_is_judged_at_its_turn_knowing_what_the_checks_beside_compiled(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The server is ready before kernel-smoke's check has said what it built into the baked caches (as FlashInfer's
    norm on an H100 test machine): judged at once, the file would be the server's; judged at its turn (its settle),
    it is left to kernel-smoke's warning."""
    norm = "/c/90a/cached_ops/norm/norm.so"
    stages = Stages()

    def smoke(ctx: core.Context) -> dict[str, Any]:
        time.sleep(0.5)
        ctx.compiled_by_checks.add(norm)
        return {"warnings": ["the image claims baked kernel caches but kernel-smoke compiled into them: ..."]}

    def server(ctx: core.Context) -> dict[str, Any]:
        watch = warmcheck.Watch([])
        watch.compiled = [norm]
        serving._WATCHED["server"] = watch
        return {"warm": {"profile_baked": True, "baked_files": 11, "compiled_count": 1, "compiled_files": [norm],
                         "compiler_processes": [], "declared_at_start": [], "archs": ["sm_90a"]}}

    registry = stages.registry()
    registry["kernel-smoke"] = core.Stage("kernel-smoke", smoke, ("gpu-visible",), gpu=True)
    registry["server"] = core.Stage("server", server, ("gpu-visible",), gpu=True, settle=serving.settle_warm)
    monkeypatch.setattr(core, "REGISTRY", registry)
    found = {r["name"]: r for r in core.run_all(core.Context(archs=["sm_90a"], mode="host"), PLANNED)}
    capsys.readouterr()
    assert found["server"]["status"] == core.PASSED and "warnings" not in found["server"]["evidence"]
    warm = found["server"]["evidence"]["warm"]
    assert warm["compiled_by_checks_beside"] == [norm] and warm["compiled_count"] == 0
    assert found["kernel-smoke"]["evidence"]["warnings"]          # named once, by the check that built it


def test_a_judgement_that_raises_fails_its_stage_not_the_probe(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stages = Stages()
    registry = stages.registry()

    def broken(ctx: core.Context, result: dict[str, Any]) -> None:
        raise KeyError("warm")
    registry["server"] = core.Stage("server", registry["server"].func, ("gpu-visible",), gpu=True, settle=broken)
    monkeypatch.setattr(core, "REGISTRY", registry)
    found = {r["name"]: r for r in core.run_all(core.Context(archs=["sm_90a"], mode="host"), PLANNED)}
    capsys.readouterr()
    assert found["server"]["status"] == core.FAILED and found["server"]["reason"] == "KeyError: 'warm'"
    assert found["first-generation"]["status"] == core.ABORTED
