"""arch-audit's judgement of one library, and the toolchain's of nvcc's age: what fails the stage (a target
arch without code it can run), what is only said (an arch audited but not built for, a PTX-only first start)."""

from __future__ import annotations

from typing import Any

from buildscripts.probe import core, cpu_stages, gpuruns, toolchain
from buildscripts.probe.fatbin import Entry


def sass(arch: int, variant: str = "") -> Entry:
    return Entry("sass", arch, variant, False, "")


def ptx(arch: int) -> Entry:
    return Entry("ptx", arch, "", False, "9.0")


CTX = core.Context(archs=["sm_90a", "sm_100a"], also_archs=["sm_103a", "sm_121a"])


def test_a_target_without_code_fails_and_audited_archs_are_only_said() -> None:
    gaps = cpu_stages._Gaps()
    found: dict[str, Any] = {}
    runs = cpu_stages._what_runs("flash", [sass(90, "a"), sass(120, "a")], CTX, found, gaps)
    assert gaps.lacking == ["flash has no code for sm_100a (it has sm_90a, sm_120a)"]
    assert set(gaps.off_target) == {"sm_103a", "sm_121a"} and not gaps.at_start
    assert runs["sm_90a"] == "sm_90a SASS" and runs["sm_100a"].startswith("nothing")
    assert found["runs"]["sm_90a"]["code"] == gpuruns.EXACT
    said = gaps.said()
    assert said[0].startswith("sm_103a is not a target arch; no code it can run in flash")
    assert "sm_120a is arch-specific and runs on its own arch alone" in said[1]


def test_ptx_only_is_a_slow_first_start_not_a_failure() -> None:
    gaps = cpu_stages._Gaps()
    cpu_stages._what_runs("tiny", [ptx(90)], CTX, {}, gaps)
    assert not gaps.lacking and not gaps.off_target
    assert set(gaps.at_start) == set(CTX.every_arch())
    assert all("would JIT-compile PTX at start" in line for line in gaps.said())


def test_a_library_without_gpu_code_is_jit_for_every_arch() -> None:
    gaps = cpu_stages._Gaps()
    found: dict[str, Any] = {"per_arch": {}}
    runs = cpu_stages._what_runs("triton", [], CTX, found, gaps)
    assert found["per_arch"] == {a: "jit" for a in CTX.every_arch()} and "JIT-compiled" in found["note"]
    assert set(runs) == set(CTX.every_arch()) and not gaps.lacking and not gaps.said()


def test_nvcc_too_old_fails_for_a_target_and_warns_for_an_audited_arch() -> None:
    ev: dict[str, Any] = {"nvcc": {}}
    problems: list[tuple[str, str]] = []
    toolchain._arch_support(CTX, (12, 8), ev, problems)   # sm_103a and sm_121a need CUDA 12.9
    assert ev["nvcc"]["knows"] == {"sm_90a": True, "sm_100a": True, "sm_103a": False, "sm_121a": False}
    assert problems == [] and len(ev["warnings"]) == 2
    assert ev["warnings"][0].startswith("sm_103a is not a target arch; nvcc 12.8 is too old for sm_103a")
    toolchain._arch_support(core.Context(archs=["sm_100a"]), (12, 6), {"nvcc": {}}, problems)
    assert problems and problems[0][0].startswith("nvcc 12.6 is too old for sm_100a")
