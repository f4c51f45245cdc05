"""The driver against the image's floor, judged by the host at the gpu-visible stage.

The probe inside the image compares only CUDA majors (the driver's CUDA against torch's, as libcuda reports
them). The host knows more: the image's CUDA (the plan's lane) and the driver, from the GPU it handed over
(nvidia-smi on the host, claims.py), or else from what the stage reports. A driver below the floor of the image's
CUDA (driver_floors.py: 13.0 needs 580.65.06; 12.8 570.26) fails gpu-visible with the class `driver-too-old`,
naming the floor and the driver found, whatever the probe said: an image verified on a driver it does not
support would vouch for a machine it may not run on. This can only fail a stage, never pass one, so the stage's
own report of its driver is good enough when the host has none.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import driver_floors
from ..results import StageResult, Status
from . import claims
from .gpus import Handed

CLASS = "driver-too-old"   # data/failures.yaml
JUDGED = (Status.PASSED, Status.FAILED)   # a stage that ran; a skipped or aborted one saw no driver


def found_driver(stages: Sequence[StageResult], handed: Handed, stage: StageResult) -> str | None:
    """The driver of the GPU the stage ran on: the host's word when it handed that GPU over, else the stage's."""
    gpu, _ = claims.device(stages, handed)
    if gpu is not None and gpu.driver:
        return gpu.driver
    said = stage.evidence.get("driver")
    return said if isinstance(said, str) and said.strip() else None


def judged(stages: Sequence[StageResult], lane_cuda: str | None, handed: Handed) -> list[StageResult]:
    """The stages with gpu-visible failed as driver-too-old when the driver is below the image's floor."""
    if lane_cuda is None:
        return list(stages)
    out = []
    for stage in stages:
        driver = found_driver(stages, handed, stage) if stage.name == "gpu-visible" and stage.status in JUDGED \
            else None
        verdict = driver_floors.judge(driver, lane_cuda) if driver else None
        if verdict is None or verdict.meets:
            out.append(stage)
            continue
        before = f" (the probe said: {stage.reason})" if stage.reason else ""
        out.append(stage.model_copy(update={
            "status": Status.FAILED, "failure_class": CLASS, "hint": verdict.fix,
            "reason": f"the NVIDIA driver is below the image's floor: {verdict.said}{before}",
            "evidence": {**stage.evidence, "driver_found": verdict.driver, "driver_floor": verdict.floor.minimum,
                         "image_cuda": verdict.floor.cuda}}))
    return out
