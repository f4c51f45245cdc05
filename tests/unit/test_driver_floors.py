"""The driver floors as data (data/driver-floors.yaml), the one rule over them (driver_floors.py), and its three
readers: `here`, the LXC preflight and the GPU ladder's gpu-visible stage, where the host names a driver below the
image's floor as `driver-too-old` with the floor and the driver it found. And the shape `here` is shipped in: a
command of the commands layer (tests/process/test_here_alone.py: it imports without the build system's own
dependencies)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from buildscripts import cli, driver_floors
from buildscripts.commands import here
from buildscripts.errors import ConfigError
from buildscripts.lxc import gpu_checks
from buildscripts.results import StageResult, Status
from buildscripts.verify import classify, driver
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
H200_R570 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "570.86.15", 143771)
H200_R580 = dataclasses.replace(H200_R570, driver="580.159.04")


@pytest.mark.parametrize(("cuda", "minimum", "compatible", "own"), [
    ("13.0", "580.65.06", None, True),          # CUDA 13.x needs R580 whatever the minor
    ("12.8", "570.26", "525.60.13", True),      # 12.x runs from R525, its PTX needs 12.8's own driver
    ("12.9", "575.51.03", "525.60.13", True),
    ("12.6", "525.60.13", None, False),         # a minor the data does not name: its major's minimum, said so
    ("13.2", "580.65.06", None, False),
])
def test_the_floors_are_nvidias(cuda: str, minimum: str, compatible: str | None, own: bool) -> None:
    floor = driver_floors.floor_for(cuda)
    assert floor is not None and (floor.minimum, floor.compatible, floor.own) == (minimum, compatible, own)
    assert ("own driver" in floor.shown()) == own


def test_an_unknown_cuda_or_driver_is_not_judged() -> None:
    assert driver_floors.floor_for("11.8") is None and driver_floors.floor_for("thirteen") is None
    assert driver_floors.judge("580.65.06", "11.8") is None and driver_floors.judge("n/a", "13.0") is None


@pytest.mark.parametrize(("found", "cuda", "meets", "words"), [
    ("580.65.06", "13.0", True, "meets"),
    ("580.159.04", "13.0", True, "meets"),
    ("575.57.08", "13.0", False, "below CUDA 13.0's floor, 580.65.06"),
    ("570.86.15", "12.8", True, "meets"),
    ("570.10", "12.8", False, "below"),             # field by field, as numbers: 10 < 26
    ("560.35.03", "12.8", False, "minor version compatibility, from 525.60.13"),
    ("520.61.05", "12.8", False, "below"),
])
def test_a_driver_is_compared_field_by_field(found: str, cuda: str, meets: bool, words: str) -> None:
    verdict = driver_floors.judge(found, cuda)
    assert verdict is not None and verdict.meets is meets and words in verdict.said
    assert (verdict.fix is None) == meets
    if not meets:
        assert verdict.fix and f"R{verdict.floor.branch}+" in verdict.fix and "host's driver" in verdict.fix


def test_a_damaged_floors_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "driver-floors.yaml"
    broken.write_text('majors: {"13": {minimum: 580}}\ntoolkits: {}\n')
    monkeypatch.setattr(driver_floors, "FLOORS", broken)
    driver_floors._data.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"majors\.13 is not"):
            driver_floors.floor_for("13.0")
    finally:
        driver_floors._data.cache_clear()


def test_the_preflight_judges_by_the_same_floors() -> None:
    old = gpu_checks.driver_for_cuda("570.86.10", "13.0")
    assert old.status == "fail" and "580.65.06" in old.detail and old.fix and "R580" in old.fix[0]
    assert gpu_checks.driver_for_cuda("570.86.10", "12.8").status == "pass"
    assert gpu_checks.driver_for_cuda("580.1", "11.8").status == "skip"


# ---------------------------------------------------------------------------------------------- gpu-visible


def visible(status: Status = Status.PASSED, **evidence: object) -> StageResult:
    return StageResult(name="gpu-visible", status=status, gpu="NVIDIA H200", arch="sm_90",
                       where="container: NVIDIA H200 (sm_90)", evidence=dict(evidence),
                       reason=None if status is Status.PASSED else "NVIDIA driver too old: it supports CUDA 12.8")


def test_a_driver_below_the_images_floor_fails_gpu_visible_with_floor_and_driver() -> None:
    stages = [visible(uuid=H200_R570.uuid), StageResult(name="kernel-smoke", status=Status.PASSED)]
    found = driver.judged(stages, "13.0", Handed((H200_R570,)))
    assert found[0].status is Status.FAILED and found[0].failure_class == "driver-too-old"
    assert "570.86.15" in (found[0].reason or "") and "580.65.06" in (found[0].reason or "")
    assert found[0].evidence["driver_found"] == "570.86.15" and found[0].evidence["driver_floor"] == "580.65.06"
    assert found[0].hint and "580.65.06 or newer" in found[0].hint
    assert found[1] == stages[1]
    assert classify.load().get("driver-too-old") is not None   # a class of the failure catalogue


def test_the_hosts_driver_counts_over_the_stages_word() -> None:
    said_new = visible(uuid=H200_R570.uuid, driver="580.159.04")   # the probe claims a newer driver
    assert driver.judged([said_new], "13.0", Handed((H200_R570,)))[0].status is Status.FAILED
    said_old = visible(uuid=H200_R580.uuid, driver="570.86.15")
    assert driver.judged([said_old], "13.0", Handed((H200_R580,)))[0].status is Status.PASSED


def test_without_a_handed_gpu_the_stages_own_report_can_only_fail_it() -> None:
    failed = visible(Status.FAILED, driver="570.86.15")
    found = driver.judged([failed], "13.0", Handed())[0]
    assert found.failure_class == "driver-too-old" and "the probe said: NVIDIA driver too old" in (found.reason or "")


@pytest.mark.parametrize("stage", [visible(Status.SKIPPED, driver="570.86.15"), visible(driver="580.159.04"),
                                   visible(driver="not a version")])
def test_what_is_not_below_a_floor_is_left_as_it_is(stage: StageResult) -> None:
    assert driver.judged([stage], "13.0", Handed()) == [stage]
    assert driver.judged([visible(driver="570.86.15")], None, Handed()) == [visible(driver="570.86.15")]


# ---------------------------------------------------------------------------------------------- the command's shape


def test_here_has_the_one_command_shape() -> None:
    assert dataclasses.is_dataclass(here.Options) and here.Options.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert all(f.kw_only for f in dataclasses.fields(here.Options)) and isinstance(here.ABOUT, str)
    options = here.parse(["--repository", "ghcr.io/org/sglang-images", "--tag", "t", "--gpu", "1"],
                         Workspace.at(ROOT), {})
    assert (options.repository, options.tags, options.gpu) == ("ghcr.io/org/sglang-images", ("t",), 1)
    assert cli.COMMANDS["here"] is here


@pytest.mark.parametrize(("argv", "words"), [
    (["--tag", "t"], "--tag names a tag of --repository"),
    (["--repository", "sglang-images"], "names no registry host"),
    (["--repository", "ghcr.io/org/x", "--tag", "bad tag"], "--tag 'bad tag'"),
    (["--report", "r.json", "--ctid", "ct"], "not a Proxmox container id"),
])
def test_a_bad_command_line_is_a_config_error(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("-", r"\-")):
        here.parse(argv, Workspace.at(ROOT), {})
