"""GPU facts come from the host: what the probe says about a GPU is a claim, checked here.

A GPU stage (results.schema.GPU_STAGES) can pass only when this verification was handed a GPU (the
device request the host made for the container, or the host's own GPUs in host and LXC mode), and the
GPU it ran on is the one the probe names: same arch, same name, the same UUID where the probe gives
one. Its `gpu`, `arch` and `where` are then the host's query of that device (nvidia-smi), never the
probe's words. A passed GPU stage with no GPU handed over, or on another GPU or arch than the host's,
fails with the class `gpu-claim-unbacked`. Stages that need no GPU carry no GPU facts at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..results import StageResult, Status
from ..results.record import GPU_STAGES
from . import classify
from .gpus import Gpu, Handed
from .handoff import UNBACKED


def _words(name: str | None) -> str:
    return re.sub(r"\s+", " ", (name or "").strip().lower())


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _uuid(text: object) -> str:
    """A GPU UUID as nvidia-smi ("GPU-…") or torch (bare) writes it, normalised; "" when it is none."""
    found = str(text or "").strip().lower().removeprefix("gpu-")
    return found if _UUID.fullmatch(found) else ""


def device(stages: Sequence[StageResult], handed: Handed) -> tuple[Gpu | None, str]:
    """The handed GPU the probe ran on, as gpu-visible names it (by UUID when it gives one), or why none fits."""
    if not handed.gpus:
        return None, f"the host handed it no GPU ({handed.why_none})"
    visible = next((s for s in stages if s.name == "gpu-visible"), None)
    claimed = _uuid(visible.evidence.get("uuid")) if visible else ""
    if claimed:
        found = next((g for g in handed.gpus if _uuid(g.uuid) == claimed), None)
        if found is None:
            return None, f"it names GPU {claimed}, which the host did not hand over"
        return found, ""
    if len(handed.gpus) == 1:
        return handed.gpus[0], ""
    return None, "it names no GPU UUID, and the host handed over several GPUs"


def contradiction(stage: StageResult, gpu: Gpu) -> str | None:
    """How the stage's claim differs from the host's GPU, or None."""
    if stage.arch and stage.arch.rstrip("af") != gpu.arch:
        return f"the probe reported {stage.gpu or 'a GPU'} ({stage.arch}); the host's GPU is {gpu.name} ({gpu.arch})"
    if stage.gpu and _words(stage.gpu) != _words(gpu.name):
        return f"the probe reported {stage.gpu}; the host's GPU is {gpu.name} ({gpu.arch})"
    return None


def _unbacked(stage: StageResult, reason: str, gpu: Gpu | None, mode: str) -> StageResult:
    claimed = f"{stage.gpu or 'a GPU'} ({stage.arch or 'arch unknown'})"
    return stage.model_copy(update={
        "status": Status.FAILED, "reason": f"{stage.name} passed by the probe's word on {claimed}, but {reason}",
        "failure_class": UNBACKED, "hint": classify.hint_for(UNBACKED), **_facts(gpu, mode)})


def _facts(gpu: Gpu | None, mode: str) -> dict[str, str | None]:
    if gpu is None:
        return {"gpu": None, "arch": None, "where": f"{mode} (cpu)"}
    return {"gpu": gpu.name, "arch": gpu.arch, "where": f"{mode}: {gpu.name} ({gpu.arch})"}


def backed(stages: Sequence[StageResult], handed: Handed, mode: str) -> list[StageResult]:
    """The stages with every GPU fact the host's, and every GPU pass the host cannot back failed."""
    gpu, why = device(stages, handed)
    out = []
    for stage in stages:
        if stage.where == "host" and not stage.gpu:       # the host's own result (a hung or dead probe)
            out.append(stage)
        elif stage.name not in GPU_STAGES:
            out.append(stage.model_copy(update=_facts(None, mode)))
        elif stage.status is Status.PASSED and gpu is None:
            out.append(_unbacked(stage, why, None, mode))
        elif stage.status is Status.PASSED and gpu is not None and (problem := contradiction(stage, gpu)):
            out.append(_unbacked(stage, problem, gpu, mode))
        else:   # not passed: it carries the host's GPU when it ran on one, else none
            out.append(stage.model_copy(update=_facts(gpu if stage.gpu and gpu else None, mode)))
    return out
