"""One shape for every place a verification runs: a container of an image (container.py), a Python
environment of this machine (host.py), a running LXC container (lxcrunner.py); per GPU, one container per
GPU (per_gpu_containers.py). Each runner puts the probe and the host's tiny model in place, runs the probe, feeds
its output to a `Handoff` (which observes the server through the runner's `Reach`) and reports the probe's
stages; `verify()` then makes the host's results of them: the server stages from the host's own
observation (served.py), every GPU fact from the GPUs the host handed over (claims.py), the driver against
the image's floor (driver.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..results import StageResult
from . import claims, driver, served, tp
from .gpus import Handed
from .handoff import Observation
from .plan import Plan

if TYPE_CHECKING:   # numpy and safetensors (host_model.py) load where a model is made, not when the CLI starts
    from .host_model import TinyModel

VERIFY_ENV = "SGLANG_IMAGES_VERIFICATION"   # marks the probe's processes (and the server) as this run's


@dataclass(frozen=True, kw_only=True)
class Options:
    """What every runner is given: the plan, where its log goes, the GPUs handed over, the names."""

    plan: Plan
    log_file: Path
    handed: Handed = field(default_factory=Handed)
    run_id: str = "manual"
    cell_id: str = "adhoc"
    keep: bool = False             # leave a container behind for debugging


@dataclass(frozen=True)
class Outcome:
    """A runner's report: the probe's stages as interpreted, and what the host saw of the server."""

    stages: list[StageResult]
    observation: Observation | None = None


class Runner(Protocol):
    mode: str   # "container", "host" or "lxc": the `where` of every result

    def run(self, options: Options, model: TinyModel | None) -> Outcome: ...


def model_for(options: Options) -> TinyModel | None:
    """Fresh weights of the profile's tiny model and their reference decode, when the server stage is planned
    on a handed GPU."""
    from . import host_model

    planned = "server" in options.plan.stages and not options.plan.server_skip
    return host_model.make(model=options.plan.server_model) if planned and options.handed.gpus else None


def verify(runner: Runner, options: Options) -> list[StageResult]:
    """The plan's stages through `runner`, as the host judges them."""
    options = replace(options, plan=tp.planned(options.plan, options.handed))
    model = model_for(options)
    outcome = runner.run(options, model)
    stages = served.merge(outcome.stages, outcome.observation, model)
    stages = tp.skipped(stages, options.plan)
    stages = claims.backed(stages, options.handed, runner.mode)
    return tp.backed(driver.judged(stages, options.plan.lane_cuda, options.handed), options.handed)
