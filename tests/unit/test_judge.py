"""results.judge: the one place verdicts are made. Verified needs the whole ladder on a target GPU."""

from __future__ import annotations

from buildscripts.results import (
    CPU_STAGES,
    GPU_STAGES,
    BuildResult,
    CellResult,
    StageResult,
    Status,
    Verdict,
    judge,
    verified_archs,
)

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


def test_each_arch_of_a_merged_record_is_judged_alone() -> None:
    sm100 = {"gpu": "NVIDIA B200", "arch": "sm_100"}
    sm120 = {"gpu": "NVIDIA RTX PRO 6000", "arch": "sm_120"}
    def cell(stages: list[StageResult], expected: dict[str, str] | None = None) -> CellResult:
        return CellResult(cell_id="c", targets=["sm_100a", "sm_120a"], build=BuildResult(status=Status.PASSED),
                          stages=stages, expected=expected)

    both = full(**sm100) + [stage(n, **sm120) for n in GPU_STAGES]
    record = cell(both)
    assert judge(record) == (Verdict.VERIFIED, "verified on sm_100, sm_120 (NVIDIA B200, NVIDIA RTX PRO 6000)")
    assert verified_archs(record) == ["sm_100", "sm_120"]
    # sm_120 only got as far as gpu-visible: verified on sm_100, and the reason says what sm_120 lacks
    partial = [*full(**sm100), stage("gpu-visible", **sm120)]
    assert judge(cell(partial)) == (Verdict.VERIFIED, "verified on sm_100 (NVIDIA B200); sm_120: incomplete")
    # a declared failure at the server on sm_120 is an expected failure; sm_100 stays verified
    expected = {"stage": "server", "class": "server-died", "reason": "dies on Blackwell workstations"}
    died = [*full(**sm100), stage("gpu-visible", **sm120), stage("kernel-smoke", **sm120),
            stage("server", Status.FAILED, failure_class="server-died", **sm120)]
    verdict, reason = judge(cell(died, expected))
    assert verdict is Verdict.EXPECTED_FAILURE and reason.startswith("server on sm_120: server-died")
    assert reason.endswith("; verified on sm_100") and verified_archs(cell(died, expected)) == ["sm_100"]
    # an arch the image was not built for verifies nothing
    off = cell(full(**sm100)).model_copy(update={"targets": ["sm_90a"]})
    assert judge(off) == (Verdict.CPU_CHECKED, "GPU stages passed on sm_100, which is not a target arch")
    # a skipped CPU stage: no arch is verified, however the GPU stages went
    skipped = [stage("facts", Status.SKIPPED), *both[1:]]
    assert verified_archs(cell(skipped)) == [] and judge(cell(skipped))[0] is Verdict.BUILT
