"""The probe's GPU decisions, and that its GPU stages can never pass on a machine without a GPU.
(The host's checks of what the probe says: test_host_judges.py.)"""

from __future__ import annotations

import pytest

from buildscripts.probe import core, gpu_stages

H200 = {"torch": "2.11.0+cu130", "cuda_runtime": "13.0", "driver_cuda": "13.0", "count": 1,
        "capability": "9.0", "name": "NVIDIA H200", "warnings": [],
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]}


def test_h200_passes_for_an_sm90a_image() -> None:
    ok, reason, gpu = gpu_stages.judge_gpu(dict(H200), ["sm_90a", "sm_100a", "sm_120a"])
    assert ok and reason == ""
    assert gpu["arch"] == "sm_90" and gpu["name"] == "NVIDIA H200" and gpu["count"] == 1


@pytest.mark.parametrize(("change", "archs", "words"), [
    ({"driver_cuda": "12.8"}, ["sm_90a"], "NVIDIA driver too old"),
    ({"error": "RuntimeError: The NVIDIA driver on your system is too old", "count": 0}, ["sm_90a"],
     "NVIDIA driver too old"),
    ({"capability": "8.9"}, ["sm_90a", "sm_100a"], "GPU arch sm_89 is not among the image's target archs"),
    ({"arch_list": ["sm_80", "sm_90"], "capability": "12.0"}, ["sm_120a"], "has no kernels for sm_120"),
    ({"count": 0}, ["sm_90a"], "torch sees no usable GPU"),
])
def test_gpu_problems_fail_with_their_cause(change: dict[str, object], archs: list[str], words: str) -> None:
    ok, reason, _ = gpu_stages.judge_gpu({**H200, **change}, archs)
    assert not ok and words in reason


def test_ptx_covers_a_newer_arch() -> None:
    info = {**H200, "capability": "12.0", "arch_list": ["sm_90", "compute_90"]}
    assert gpu_stages.judge_gpu(info, ["sm_120a"])[0]


def test_without_a_gpu_every_gpu_stage_is_skipped_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu_stages.NO_GPU_ENV, raising=False)
    monkeypatch.setattr("glob.glob", lambda pattern: [])
    monkeypatch.setattr("shutil.which", lambda name: None)
    ctx = core.Context(archs=["sm_90a"], mode="host")
    results = core.run_all(ctx, ["gpu-visible", "kernel-smoke", "server", "first-generation"])
    assert [r["status"] for r in results] == ["skipped"] * 4
    assert results[0]["reason"].startswith("no GPU visible: no /dev/nvidia* device")
    assert all(r["reason"].startswith("needs a GPU: no GPU visible") for r in results[1:])
    assert ctx.gpu is None


def test_the_hosts_reason_reaches_the_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpu_stages.NO_GPU_ENV, "the Docker engine has no nvidia runtime")
    result = core.run_stage(core.Context(archs=["sm_90a"]), core.REGISTRY["gpu-visible"])
    assert result["status"] == "skipped"
    assert result["reason"] == "no GPU visible: the Docker engine has no nvidia runtime"
