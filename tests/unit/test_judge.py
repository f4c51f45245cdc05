"""results.judge: the one place verdicts are made. Verified needs the whole ladder on a target GPU."""

from __future__ import annotations

from buildscripts.results import CPU_STAGES, GPU_STAGES, BuildResult, CellResult, StageResult, Status, Verdict, judge

GPU = {"gpu": "NVIDIA H200", "arch": "sm_90"}


def stage(name: str, status: Status = Status.PASSED, /, **extra: str) -> StageResult:
    return StageResult.model_validate({"name": name, "status": status, **extra})


def cell(stages: list[StageResult], expected: dict[str, str] | None = None) -> CellResult:
    return CellResult(cell_id="c", axes={"archs": "sm_90a sm_100a"}, build=BuildResult(status=Status.PASSED),
                      stages=stages, expected=expected)


def full(**gpu: str) -> list[StageResult]:
    return [stage(n) for n in CPU_STAGES] + [stage(n, **gpu) for n in GPU_STAGES]


def test_the_whole_ladder_on_a_target_gpu_is_verified() -> None:
    verdict, reason = judge(cell(full(**GPU)))
    assert verdict is Verdict.VERIFIED and "sm_90" in reason


def test_gpu_stages_alone_are_not_verified() -> None:
    verdict, reason = judge(cell([stage(n, **GPU) for n in GPU_STAGES]))
    assert verdict is Verdict.BUILT and "import" in reason


def test_without_gpu_the_best_is_cpu_checked() -> None:
    stages = [stage(n) for n in CPU_STAGES] + [stage(n, Status.SKIPPED, reason="no GPU") for n in GPU_STAGES]
    assert judge(cell(stages))[0] is Verdict.CPU_CHECKED


def test_a_gpu_of_no_target_arch_is_not_verified() -> None:
    verdict, reason = judge(cell(full(gpu="A100", arch="sm_80")))
    assert verdict is Verdict.CPU_CHECKED and "not a target arch" in reason


def test_expected_failure_may_name_several_stages() -> None:
    expected = {"stage": "import,toolchain", "class": "cuda-home-missing", "reason": "no CUDA home"}
    stages = [stage("facts"), stage("import"),
              stage("toolchain", Status.FAILED, failure_class="cuda-home-missing")]
    assert judge(cell(stages, expected))[0] is Verdict.EXPECTED_FAILURE
    other = [stage("facts"), stage("import", Status.FAILED, failure_class="no-host-compiler")]
    assert judge(cell(other, expected))[0] is Verdict.FAILED


def test_unexpected_pass_only_when_the_expected_stage_ran_and_passed() -> None:
    expected = {"stage": "server", "class": "", "reason": "dies at start"}
    no_gpu = [stage(n) for n in CPU_STAGES] + [stage(n, Status.SKIPPED, reason="no GPU") for n in GPU_STAGES]
    assert judge(cell(no_gpu, expected))[0] is Verdict.CPU_CHECKED
    assert judge(cell(full(**GPU), expected))[0] is Verdict.UNEXPECTED_PASS
