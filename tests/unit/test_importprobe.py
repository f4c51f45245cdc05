"""Host-mode probe output becomes classified, judged results (no processes, no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildscripts import results
from buildscripts.commands import import_probe
from buildscripts.errors import ResultsError
from buildscripts.results import Status, Verdict
from buildscripts.verify import importprobe
from tests.commands import call

GPU = {"gpu": "NVIDIA H200", "arch": "sm_90", "where": "host (gpu)"}


def probe_file(tmp_path: Path, name: str, stages: list[dict[str, object]]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(stages))
    return path


def passing() -> list[dict[str, object]]:
    cpu: list[dict[str, object]] = [{"name": name, "status": "passed", "duration_s": 1.0, "evidence": {}}
                                    for name in results.CPU_STAGES]
    return [
        *cpu,
        {"name": "gpu-visible", "status": "passed", "duration_s": 3.0, **GPU,
         "evidence": {"name": "NVIDIA H200", "capability": "9.0", "torch": "2.11.0+cu130", "driver": "580.1"}},
        {"name": "kernel-smoke", "status": "passed", "duration_s": 60.0, **GPU, "evidence": {}},
        {"name": "nccl-allreduce", "status": "passed", "duration_s": 4.0, **GPU, "evidence": {"world_size": 1}},
        {"name": "server", "status": "passed", "duration_s": 121.0, **GPU,
         "evidence": {"seconds_to_http": 51.0, "seconds_to_ready": 121.0}},
        {"name": "first-generation", "status": "passed", "duration_s": 2.0, **GPU,
         "evidence": {"reference": {"verdict": "all 16 tokens equal"}}},
    ]


def test_gpu_stages_a_file_says_passed_are_claims_and_fail(tmp_path: Path) -> None:
    cell = importprobe.cell_from_probe("host-a", probe_file(tmp_path, "a", passing()), {"sglang": "0.5.16"})
    assert cell.verdict is Verdict.FAILED and not cell.verified_archs
    assert "failed at gpu-visible: gpu-claim-unbacked" in (cell.verdict_reason or "")
    for name in results.GPU_STAGES:
        stage = cell.stage(name)
        assert stage is not None and stage.status is Status.FAILED and stage.arch is None, stage
    assert cell.stage("server").failure_class == "server-unobserved"  # type: ignore[union-attr]
    assert cell.versions["torch"] == "2.11.0+cu130"


def test_a_server_that_dies_without_nvcc_fails_with_a_class_and_hint(tmp_path: Path) -> None:
    stages = passing()
    at = {stage["name"]: i for i, stage in enumerate(stages)}
    stages[at["server"]] = {"name": "server", "status": "failed", "duration_s": 47.0, **GPU,
                 "reason": "server process exited with code 1 after 47s, before it was ready",
                 "log_excerpt": "RuntimeError: ninja exited with status 127\n"
                                "/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found"}
    stages[at["first-generation"]] = {"name": "first-generation", "status": "aborted",
                                      "reason": "prerequisite did not pass: server"}
    cell = importprobe.cell_from_probe("host-b", probe_file(tmp_path, "b", stages), {})
    assert cell.verdict is Verdict.FAILED
    server = cell.stage("server")
    assert server is not None and server.status is Status.FAILED
    assert server.failure_class == "sglang-jit-kernel-needs-nvcc" and server.hint
    assert [s.name for s in cell.stages] == list(results.LADDER)   # in ladder order: gpu-visible fails first
    assert "failed at gpu-visible" in (cell.verdict_reason or "")


def test_without_gpu_the_cell_is_only_cpu_checked(tmp_path: Path) -> None:
    cpu = [s for s in passing() if s["name"] in results.CPU_STAGES]
    stages: list[dict[str, object]] = [
        *cpu, {"name": "gpu-visible", "status": "skipped", "reason": "no GPU visible: no /dev/nvidia* device"},
        {"name": "server", "status": "skipped", "reason": "needs a GPU: no GPU visible"}]
    cell = importprobe.cell_from_probe("host-cpu", probe_file(tmp_path, "cpu", stages), {})
    assert cell.verdict is Verdict.CPU_CHECKED
    partial = importprobe.cell_from_probe("host-part", probe_file(tmp_path, "part", stages[2:]), {})
    assert partial.verdict is Verdict.BUILT  # CPU stages that never ran: nothing can be claimed


def test_main_writes_results_and_summary(tmp_path: Path) -> None:
    a = probe_file(tmp_path, "a", passing())
    out = tmp_path / "evidence"
    assert call(import_probe, ["--cell", f"host-a={a}", "--out", str(out), "--title", "H200", "--note", "n1",
                             "--timing", f"cold={a}"]) == 0
    run = results.load(out / "results.json")
    assert [c.verdict for c in run.cells] == [Verdict.FAILED]
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# H200") and "- n1" in summary and "`gpu-claim-unbacked`" in summary
    assert "| cold | `` | 51.0 | 121.0 | passed |" in summary   # a measurement, still shown as one


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(ResultsError, match="is not probe output"):
        importprobe.cell_from_probe("x", bad, {})
    with pytest.raises(ResultsError, match="must look like KEY=VALUE"):
        call(import_probe, ["--cell", "nonsense", "--out", str(tmp_path)])


def test_timing_rows_show_flags_and_times_without_host_and_port() -> None:
    server = {"name": "server", "status": "passed", "evidence": {
        "argv": ["-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1", "--port", "30000",
                 "--attention-backend", "flashinfer"], "seconds_to_http": 57.1, "seconds_to_ready": 59.1}}
    row = importprobe.timing_rows("warm", [server])
    assert row == "| warm | `--attention-backend flashinfer` | 57.1 | 59.1 | passed |"
    died = {"name": "server", "status": "failed", "reason": "server process exited with code 1", "evidence": {}}
    assert importprobe.timing_rows("c", [died]).endswith("| – | – | failed: server process exited with code 1 |")
