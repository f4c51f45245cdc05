"""Tensor parallelism: a server profile whose size is the GPUs the run is given (the one home of that rule).

A profile asks for it with the placeholder `{gpus}` in its args (`--tp-size, "{gpus}"` in matrix.yaml's
`tp` profile); the host, which decides which GPUs a verification gets (gpus.py), puts their number in
before the plan becomes the probe's command line. A container verified with such a profile is handed every
GPU of the runner. With fewer than two GPUs there is nothing tensor-parallel to run: the server stage is
SKIPPED with that reason (never passed as if tp ran), while the nccl-allreduce stage still runs, at the
world size it has, and says so. The nccl-allreduce stage passes only at the world size the host handed over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..matrix.schema import Profile
from ..results import StageResult, Status
from . import classify, served
from .gpus import Handed
from .handoff import UNBACKED
from .plan import Plan, planned_stages

PLACEHOLDER = "{gpus}"
ALLREDUCE = "nccl-allreduce"
MIN_GPUS = 2


def wants_all_gpus(profile: Profile | Sequence[str]) -> bool:
    """Whether a profile's server spans the run's GPUs (its args hold the placeholder)."""
    args = profile.args if isinstance(profile, Profile) else profile
    return any(PLACEHOLDER in arg for arg in args)


def planned(plan: Plan, handed: Handed) -> Plan:
    """The plan with its server args made for the GPUs handed over (and the server skipped with the reason
    when a tensor-parallel profile got fewer than two)."""
    if not wants_all_gpus(plan.server_args):
        return plan
    count = len(handed.gpus)
    size = max(count, 1)
    args = tuple(arg.replace(PLACEHOLDER, str(size)) for arg in plan.server_args)
    skip = None
    heads = attention_heads(plan.server_model)
    if count < MIN_GPUS:
        have = f"{count} GPU" + ("" if count == 1 else "s") if count else f"no GPU ({handed.why_none})"
        skip = (f"profile {plan.server_profile!r} serves with tensor parallelism across the run's GPUs and needs "
                f"at least {MIN_GPUS}; this run was given {have}")
    elif heads % count:
        skip = (f"profile {plan.server_profile!r} would split the tiny model's {heads} attention heads over "
                f"{count} GPUs, which does not divide them; the tp profiles verify on machines of 2, 4 or 8 GPUs")
    # The all-reduce is what a tp verdict stands on besides the tokens: a tp server is never planned without it
    stages = plan.stages
    if "server" in stages and ALLREDUCE not in stages:
        stages = tuple(planned_stages((*stages, ALLREDUCE)))
    return replace(plan, server_args=args, server_skip=skip, stages=stages)


def attention_heads(model: str) -> int:
    """The attention heads of the tiny model a profile serves, which tensor parallelism splits evenly."""
    from . import host_model  # numpy: loaded when a plan is made for GPUs, not when the CLI starts

    heads = host_model.ARCHITECTURES[model].config["num_attention_heads"]
    assert isinstance(heads, int)
    return heads


def skipped(stages: Sequence[StageResult], plan: Plan) -> list[StageResult]:
    """The server and first-generation stages skipped with the host's reason when the host decided the server
    was not to run (`planned`): what the image under test reports for them is not asked."""
    if not plan.server_skip:
        return list(stages)
    reasons = {"server": plan.server_skip, "first-generation": served.after_skipped(plan.server_skip)}
    return [stage.model_copy(update={"status": Status.SKIPPED, "reason": reasons[stage.name], "evidence": {},
                                     "failure_class": None, "hint": None})
            if stage.name in reasons else stage for stage in stages]


def backed(stages: Sequence[StageResult], handed: Handed) -> list[StageResult]:
    """nccl-allreduce passes only at the world size the host handed over: a probe that ran fewer (or more)
    ranks than the GPUs given has not shown what the verdict will say."""
    out = []
    for stage in stages:
        world = stage.evidence.get("world_size")
        if stage.name == ALLREDUCE and stage.status is Status.PASSED and world != len(handed.gpus):
            reason = (f"nccl-allreduce passed at world size {world}, but the host handed over "
                      f"{len(handed.gpus)} GPU(s)")
            stage = stage.model_copy(update={"status": Status.FAILED, "reason": reason, "failure_class": UNBACKED,
                                             "hint": classify.hint_for(UNBACKED)})
        out.append(stage)
    return out
