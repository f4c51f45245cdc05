"""The drift and coherence rules, on pins recorded from real `uv pip compile` runs (tests/unit/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts import matrix
from buildscripts.lock import drift, lockfile
from buildscripts.lock.layers import binds_toolkit
from buildscripts.matrix.schema import TorchLane

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[2]
CU130 = TorchLane(torch="2.11.0", cuda="cu130")
CU128 = TorchLane(torch="2.9.1", cuda="cu128")


def pins(name: str) -> dict[str, str]:
    return {n: p.version for n, p in lockfile.parse_pins((DATA / f"pins-{name}.txt").read_text()).items()}


LANE_211 = "lanes-torch2.11.0-cu130-bookworm"
LANE_291 = "lanes-torch2.9.1-cu128-bookworm"
SGLANG_0516 = "sglang-sglang0.5.16-torch2.11.0-cu130-bookworm"
# The same SGLang resolved without drift.compiler_constraints: nvcc, crt, nvvm 13.5 and cccl 13.3.
UNCONSTRAINED_0516 = "sglang-unconstrained-sglang0.5.16-torch2.11.0-cu130-bookworm"
TOOLKIT_0516 = "toolkits-sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
TOOLKIT_0510 = "toolkits-sglang0.5.10-torch2.9.1-cu128-pip-bookworm"


def test_recorded_lanes_keep_their_promise() -> None:
    assert drift.lane_problems(CU130, pins(LANE_211)) == []
    assert drift.lane_problems(CU128, pins(LANE_291)) == []


def test_torch_211_declared_cu128_is_refused_naming_versions_and_flavours() -> None:
    problems = drift.lane_problems(TorchLane(torch="2.11.0", cuda="cu128"), pins(LANE_211))
    text = " ".join(problems)
    assert "torch 2.11.0" in text
    assert "CUDA 13.0" in text and "nvidia-cuda-runtime 13.0.96" in text and "cu130" in text
    assert "declares cu128 (CUDA 12.8)" in text
    assert "cuda-toolkit 13.0.2" in text  # torch 2.11.0 also requires the 13.0 cuda-toolkit metapackage


def test_torch_291_declared_cu130_is_refused() -> None:
    problems = drift.lane_problems(TorchLane(torch="2.9.1", cuda="cu130"), pins(LANE_291))
    assert any("CUDA 12.8 runtime (nvidia-cuda-runtime-cu12 12.8.90" in p for p in problems)


def test_a_resolver_that_moved_torch_is_refused() -> None:
    moved = {**pins(LANE_211), "torch": "2.12.0"}
    problems = drift.lane_problems(CU130, moved)
    assert problems == ["resolved torch 2.12.0, but the lane declares torch 2.11.0"]


def test_a_local_version_of_the_wrong_flavour_is_refused() -> None:
    problems = drift.lane_problems(CU130, {**pins(LANE_211), "torch": "2.11.0+cu128"})
    assert problems == ["resolved torch 2.11.0+cu128 is a cu128 build, but the lane declares cu130"]
    assert drift.lane_problems(CU130, {**pins(LANE_211), "torch": "2.11.0+cu130"}) == []


def test_a_cpu_only_torch_is_refused() -> None:
    cpu = {"torch": "2.11.0+cpu", "filelock": "3.0"}
    assert "pulls no CUDA runtime" in drift.lane_problems(CU130, cpu)[0]


def test_sglang_layer_must_hold_the_declared_sglang_and_torch() -> None:
    recorded = pins(SGLANG_0516)
    assert drift.sglang_problems("0.5.16", CU130, recorded) == []
    fallback = {**recorded, "sglang": "0.5.9"}
    assert drift.sglang_problems("0.5.16", CU130, fallback) == [
        "the resolver picked sglang 0.5.9 instead of sglang 0.5.16"
    ]


def test_an_sglang_layer_with_a_compiler_off_the_lanes_cuda_is_refused() -> None:
    assert drift.sglang_problems("0.5.16", CU130, pins(UNCONSTRAINED_0516)) == [
        "toolkit components are not on the lane's CUDA 13.0 (cu130): nvidia-cuda-cccl 13.3.5.0.6, "
        "nvidia-cuda-crt 13.5.37, nvidia-cuda-nvcc 13.5.37, nvidia-nvvm 13.5.37"
    ]


def test_compiler_constraints_hold_every_component_on_the_lanes_cuda() -> None:
    cu130 = drift.compiler_constraints(CU130)
    assert "nvidia-cuda-nvcc==13.0.*" in cu130 and "nvidia-nvvm-cu13==13.0.*" in cu130
    assert {line.split("==")[0].removesuffix("-cu13") for line in cu130} == set(drift.TOOLKIT_COMPONENTS)
    cu128 = drift.compiler_constraints(CU128)
    assert "nvidia-cuda-nvcc-cu12==12.8.*" in cu128
    assert all(line.split("==")[0].endswith("-cu12") for line in cu128)


def test_sglang_layer_alone_is_skewed_and_the_toolkit_lock_fixes_it() -> None:
    sglang = pins(UNCONSTRAINED_0516)
    assert drift.toolkit_skew(CU130, sglang) == [
        "nvidia-cuda-cccl 13.3.5.0.6", "nvidia-cuda-crt 13.5.37",
        "nvidia-cuda-nvcc 13.5.37", "nvidia-nvvm 13.5.37",
    ]
    installed = drift.overlay(sglang, pins(TOOLKIT_0516))
    assert drift.toolkit_skew(CU130, installed) == []
    assert installed["nvidia-cuda-nvcc"] == "13.0.88"


@pytest.mark.parametrize(
    ("name", "version", "binds"),
    [("numpy", "2.3.0", True), ("nvidia-cuda-nvcc", "13.0.88", True), ("nvidia-cuda-nvcc", "13.5.37", False),
     ("cuda-toolkit", "13.0.2", False), ("nvidia-cublas", "13.1.0.3", True)],
)
def test_which_sglang_pins_bind_the_toolkit_lock(name: str, version: str, binds: bool) -> None:
    cell = next(c for c in matrix.load(ROOT / "matrix.yaml").buildable() if c.lane.cuda == "cu130")
    assert binds_toolkit(name, version, cell) is binds


def test_cu128_toolkit_matches_torch_291_runtime() -> None:
    installed = drift.overlay(pins(LANE_291), pins(TOOLKIT_0510))
    assert drift.toolkit_skew(CU128, installed) == []
    assert installed["nvidia-cuda-runtime-cu12"] == "12.8.90"


def test_a_toolkit_with_a_stray_component_names_it() -> None:
    installed = {**drift.overlay(pins(UNCONSTRAINED_0516), pins(TOOLKIT_0516)), "nvidia-cuda-crt": "13.5.37"}
    skewed = drift.toolkit_skew(CU130, installed)
    assert skewed == ["nvidia-cuda-crt 13.5.37"]
    assert drift.skew_message(CU130, skewed) == (
        "toolkit components are not on the lane's CUDA 13.0 (cu130): nvidia-cuda-crt 13.5.37"
    )


@pytest.mark.parametrize(
    ("name", "component"),
    [("nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc"), ("nvidia-nvvm", "nvidia-nvvm"),
     ("cuda-toolkit", "cuda-toolkit"),
     ("nvidia-cublas", None), ("nvidia-cuda-nvdisasm", None)],
)
def test_component_names(name: str, component: str | None) -> None:
    assert drift.component_of(name) == component


def test_key_versions_for_the_report() -> None:
    installed = drift.overlay(pins(SGLANG_0516), pins(TOOLKIT_0516))
    assert drift.key_versions(installed) == {
        "torch": "2.11.0", "cuda": "cu130", "cuda-runtime": "13.0.96", "sglang": "0.5.16",
        "sglang-kernel": "0.4.5", "flashinfer": "0.6.14", "deep-gemm": "0.1.4.post1", "triton": "3.6.0",
        "nvcc": "13.0.88",
    }
    assert drift.key_versions({"sgl-kernel": "0.3.1"}) == {"sglang-kernel": "0.3.1"}
