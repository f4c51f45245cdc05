"""What the verification shares with others where it runs: /dev/shm, and the GPU's memory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from buildscripts.probe import core, gpu_stages, gpumemory, shm
from buildscripts.report import common, html, markdown
from buildscripts.results import RunResults, notes
from tests.results_factory import make_cell, vouched

MIB = 1 << 20
GIB = 1 << 30


def test_dev_shm_is_measured_with_its_file_system() -> None:
    found = shm.measure()
    st = os.statvfs("/dev/shm")
    assert found["total_bytes"] == st.f_blocks * st.f_frsize and found["free_bytes"] <= found["total_bytes"]
    assert found["fstype"] == "tmpfs" and found["total_gib"] == round(found["total_bytes"] / GIB, 2)


def test_a_missing_dev_shm_is_said(tmp_path: Path) -> None:
    found = shm.measure(str(tmp_path / "absent"))
    assert "error" in found and "FileNotFoundError" in found["error"]
    said = shm.warning(found, "container")
    assert said and said.startswith(f"no usable {tmp_path / 'absent'}") and "--shm-size 16g" in said


@pytest.mark.parametrize(("mode", "fix"), [
    ("container", "run the container with `--shm-size 16g` (or `--ipc=host`"),
    ("lxc", "lxc.mount.entry: tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16g,create=dir 0 0"),
    ("host", "mount -o remount,size=16G /dev/shm"),
])
def test_dockers_default_64_mib_warns_with_the_fix_for_where_it_runs(mode: str, fix: str) -> None:
    said = shm.warning({"path": "/dev/shm", "total_bytes": 64 * MIB, "free_bytes": 64 * MIB}, mode)
    assert said and said.startswith("/dev/shm is 64 MiB, below the 1 GiB NCCL needs for a server on more than one GPU")
    assert fix in said


def test_one_gib_and_more_is_enough() -> None:
    assert shm.warning({"path": "/dev/shm", "total_bytes": GIB, "free_bytes": 0}, "container") is None
    assert shm.warning({"path": "/dev/shm", "total_bytes": 16 * GIB, "free_bytes": GIB}, "lxc") is None


def test_the_facts_stage_carries_the_measure_and_a_small_shm_as_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    small = {"path": "/dev/shm", "total_bytes": 64 * MIB, "free_bytes": 60 * MIB, "total_gib": 0.06, "free_gib": 0.06}
    monkeypatch.setattr(shm, "measure", lambda path=shm.PATH: dict(small))
    result = core.run_stage(core.Context(archs=["sm_90a"]), core.REGISTRY["facts"])
    assert result["status"] == core.PASSED   # a warning, never a failure
    assert result["evidence"]["shm"]["total_bytes"] == 64 * MIB
    assert result["evidence"]["warnings"][0].startswith("/dev/shm is 64 MiB")


def test_an_h200_mostly_held_by_another_process_warns_and_names_the_numbers() -> None:
    ev, said = gpumemory.summary({"free_bytes": int(10.3 * GIB), "total_bytes": int(139.8 * GIB)})
    assert ev["free_gib"] == 10.3 and ev["total_gib"] == 139.8 and ev["used_fraction"] > 0.9
    assert said and said.startswith("only 10.3 of 139.8 GiB of GPU memory was free when the GPU stages began: "
                                    "129.5 GiB is held by other processes")
    assert "a container sees none" in said and "--gpu" in said
    _ev, named = gpumemory.summary({"free_bytes": 10 * GIB, "total_bytes": 140 * GIB}, ["4242, python3, 132000 MiB"])
    assert named and "4242, python3, 132000 MiB" in named


def test_an_idle_gpu_or_an_unreported_one_says_nothing() -> None:
    assert gpumemory.summary({"free_bytes": 139 * GIB, "total_bytes": 140 * GIB})[1] is None
    assert gpumemory.summary({"free_bytes": 70 * GIB, "total_bytes": 140 * GIB})[1] is None   # half: not most
    ev, said = gpumemory.summary(None)
    assert said is None and "error" in ev


def test_gpu_visible_warns_when_others_hold_most_of_the_gpu_and_still_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    info: dict[str, Any] = {"torch": "2.11.0+cu130", "cuda_runtime": "13.0", "driver_cuda": "13.0", "count": 1,
                            "capability": "9.0", "name": "NVIDIA H200", "arch_list": ["sm_90"], "warnings": [],
                            "memory": {"free_bytes": int(10.3 * GIB), "total_bytes": int(139.8 * GIB)}}
    monkeypatch.delenv(gpu_stages.NO_GPU_ENV, raising=False)
    monkeypatch.setattr("buildscripts.probe.gpu_stages.glob.glob", lambda pattern: ["/dev/nvidia0"])
    answer = subprocess.CompletedProcess([], 0, stdout=gpu_stages.JSON_PREFIX + json.dumps(info))
    monkeypatch.setattr(core, "python_snippet", lambda code, timeout: answer)
    monkeypatch.setattr(gpu_stages, "_nvidia_smi", lambda: {"driver": "580.95"})
    monkeypatch.setattr(core, "sh", lambda argv, timeout: subprocess.CompletedProcess(argv, 0, ""))
    ctx = core.Context(archs=["sm_90a"], mode="host")
    result = core.run_stage(ctx, core.REGISTRY["gpu-visible"])
    assert result["status"] == core.PASSED and result["arch"] == "sm_90"
    assert result["evidence"]["memory"]["free_gib"] == 10.3
    assert result["evidence"]["warnings"][0].startswith("only 10.3 of 139.8 GiB")


def test_reports_show_what_was_measured_and_the_warnings_beside_the_verdict() -> None:
    cell = make_cell("verified")
    shared = {"path": "/dev/shm", "total_bytes": 64 * MIB, "total_gib": 0.06, "free_gib": 0.06, "fstype": "tmpfs"}
    crowded = "only 10.3 of 139.8 GiB of GPU memory was free when the GPU stages began"
    stages = [s.model_copy(update={"evidence": {"shm": shared, "warnings": ["/dev/shm is 64 MiB"]}})
              if s.name == "facts" else
              s.model_copy(update={"evidence": {"memory": {"free_gib": 10.3, "total_gib": 139.8},
                                                "warnings": [crowded]}})
              if s.name == "gpu-visible" else s for s in cell.stages]
    seen = cell.model_copy(update={"stages": stages})
    verdict, reason = common.verdict_of(seen)
    assert verdict is common.verdict_of(cell)[0]   # a warning never changes the verdict
    assert f"warning from gpu-visible: {crowded}" in reason and "warning from facts: /dev/shm is 64 MiB" in reason
    rows = dict(notes.measured(seen))
    assert rows["/dev/shm"] == "0.06 GiB (tmpfs), 0.06 GiB free"
    gpu_row = next(k for k in rows if k.startswith("GPU memory free at gpu-visible"))
    assert rows[gpu_row] == "10.3 of 139.8 GiB"
    run = RunResults(run_id="r", started="2026-12-02T10:00:00+00:00", cells=[seen])
    page = html.render(vouched(run))
    assert "0.06 GiB (tmpfs), 0.06 GiB free" in page and "10.3 of 139.8 GiB" in page
    assert crowded in markdown.document(vouched(run))
