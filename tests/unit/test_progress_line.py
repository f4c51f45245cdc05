"""A cell's verification as one progress line while a run goes on (the console fits a screen): the stages
counted by status, the failed ones by class, the skipped ones once with their first reason."""

from __future__ import annotations

from buildscripts.report.console import verification_step
from buildscripts.results import StageResult, Status, Verdict

NO_GPU = "no GPU visible: nvidia-smi not found on PATH"


def stage(name: str, status: Status, reason: str | None = None, failure_class: str | None = None,
          where: str = "container (cpu)", seconds: float = 1.0) -> StageResult:
    return StageResult(name=name, status=status, reason=reason, failure_class=failure_class, where=where,
                       duration_s=seconds)


def gpu_skipped() -> list[StageResult]:
    return [stage("gpu-visible", Status.SKIPPED, NO_GPU),
            *(stage(n, Status.SKIPPED, f"needs a GPU: {NO_GPU}") for n in ("kernel-smoke", "server"))]


def test_a_cpu_checked_cell_is_one_line_of_counts_with_the_gpu_stages_reason_once() -> None:
    stages = [stage("facts", Status.PASSED), stage("import", Status.PASSED), *gpu_skipped()]
    assert verification_step(stages) == ("passed", f"2 passed, 3 skipped from gpu-visible ({NO_GPU})")


def test_failed_stages_are_grouped_by_class_and_the_line_fails() -> None:
    stages = [stage("facts", Status.PASSED),
              stage("import", Status.FAILED, "no CUDA home", "cuda-home-missing"),
              stage("toolchain", Status.FAILED, "no nvcc", "cuda-home-missing"),
              stage("jit-compile", Status.FAILED, "it crashed"),
              stage("server", Status.ABORTED, "a prerequisite failed: import"), *gpu_skipped()]
    status, detail = verification_step(stages)
    assert status == "failed"
    assert detail == ("1 passed, 3 failed: import, toolchain (cuda-home-missing); jit-compile (it crashed), "
                      "1 aborted from server (a prerequisite failed: import), "
                      f"3 skipped from gpu-visible ({NO_GPU})")


def test_emulation_is_said_once_and_nothing_that_ran_reads_as_skipped() -> None:
    emulated = "container (cpu, under emulation)"
    stages = [stage("facts", Status.PASSED, where=emulated), stage("import", Status.PASSED, where=emulated)]
    assert verification_step(stages) == ("passed", "under emulation, 2 passed")
    assert verification_step(gpu_skipped())[0] == "skipped"


def test_a_cell_declared_to_fail_reads_as_its_verdict_not_as_a_failure_of_the_run() -> None:
    stages = [stage("facts", Status.PASSED),
              stage("toolchain", Status.FAILED, "no CUDA home", "cuda-home-missing"), *gpu_skipped()]
    assert verification_step(stages, Verdict.EXPECTED_FAILURE) == (
        "expected", f"failed as declared: 1 passed, 1 failed: toolchain (cuda-home-missing), "
                    f"3 skipped from gpu-visible ({NO_GPU})")
    assert verification_step(stages, Verdict.FAILED)[0] == "failed"   # a failure that was not declared stays one
    passed = [stage("facts", Status.PASSED), stage("toolchain", Status.PASSED)]
    assert verification_step(passed, Verdict.UNEXPECTED_PASS) == (
        "unexpected", "declared to fail, but it passed: 2 passed")
