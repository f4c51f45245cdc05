"""Provisioning: what this engine (or this machine) provides every verification of a command, found once (the
GPUs, discovered and said on screen with what may still go wrong; the GPU a container gets; the network its
server runs in and why that network is not cut, when it is not), and the one request each verification is then
made from (request.py): the plan for its targets, with the GPUs and the names.

One home for this preamble, so that `verify IMAGE` and `nox -s build` can never give the same image different
GPUs, networks or plans, nor say them differently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import log
from ..matrix import Cell
from ..matrix.schema import Profile
from ..results import ImageInfo, now
from ..trust import keys
from ..trust.keys import PublicKey
from . import gpus
from .asked import SHM_SIZE, Asked, Place
from .container import network_plan
from .plan import DEFAULT_ARCHS, Plan, lane_from_labels, stage_timeout
from .request import Provision, Sealing, VerificationRequest

if TYPE_CHECKING:
    import docker


def find(client: docker.DockerClient, gpu: int, info: Mapping[str, Any] | None = None, *, all_gpus: bool = False,
         shm_size: str = SHM_SIZE) -> Provision:
    """The provision for GPU index `gpu`, or every GPU (`all_gpus`: a tensor-parallel profile), none when
    containers cannot have GPUs here; `info` is `client.info()` when the caller has it already."""
    discovery = gpus.discover(client.info() if info is None else info)
    network, cut_problem = network_plan(client)
    chosen = gpu if discovery.usable_in_containers else None
    if cut_problem:
        log.warn(f"the server stage keeps a network: {cut_problem}")
    options = gpus.container_options(discovery, gpu=chosen, all_gpus=all_gpus, shm_size=shm_size)
    return Provision(discovery=discovery, options={**options, **network}, network=network,
                     handed=gpus.handed(discovery, chosen, all_gpus=all_gpus), cut_problem=cut_problem)


def here(env: Mapping[str, str]) -> Provision:
    """This machine's GPUs, said on screen (host and LXC mode: the probe runs here, with what the machine has),
    and those a probe given `env` can use."""
    found = gpus.discover(None)
    say(found)
    return Provision(discovery=found, handed=gpus.on_host(found, env))


def say(discovery: gpus.Discovery, before: str = "") -> None:
    """The GPUs found (after `before`, e.g. the run's line), then each warning about them."""
    log.info(before + discovery.summary())
    for warning in discovery.warnings:
        log.warn(warning)


def plan(asked: Asked, profile: Profile, *, cell: Cell | None = None, labels: Mapping[str, str] | None = None,
         also_archs: Sequence[str] = ()) -> Plan:
    """The one planning rule: the targets asked for, else the cell's, else what the image's `labels` declare,
    else the defaults (the lane likewise); the stages asked for; each stage's deadline from the profile."""
    label_lane, label_archs = lane_from_labels(labels or {})
    return Plan.make(archs=asked.archs or (cell.archs if cell else None) or label_archs or DEFAULT_ARCHS,
                     lane_cuda=asked.lane_cuda or (cell.lane.cuda_version if cell else None) or label_lane,
                     stages=asked.stages, stage_timeout=stage_timeout(profile, asked.stage_timeout), profile=profile,
                     profile_name=asked.profile, also_archs=cell.also_audit if cell else also_archs)


def request(asked: Asked, given: Provision, chosen: Plan, *, cell_id: str, cell: Cell | None = None,
            facts: ImageInfo | None = None, place: Place | None = None) -> VerificationRequest:
    """The request of one verification: `chosen` plan on the GPUs `given`, named `cell_id` (its log folder is
    runs/RUN_ID/CELL_ID), as `cell` of the matrix when it is one, in `place` (default: a container of the image);
    `facts` as the caller read them."""
    return VerificationRequest(plan=chosen, provision=given, cell_id=cell_id, logs=asked.run_dir / cell_id,
                               run_id=asked.run_id, cell=cell, gpu=asked.gpu, per_gpu=asked.per_gpu,
                               keep=asked.keep_containers, facts=facts, place=place or Place(), env=asked.env)


def sealing(asked: Asked, results: Path, *, unsealed: str | None,
            trusted: Sequence[PublicKey] = ()) -> Sealing:
    """Who seals the record going into `results`: this verifier's key, read now (a bad one is said before the
    ladder, not after it); none for a run that vouches for nothing (`unsealed` says why: no key is read for it)."""
    signing = None if unsealed else keys.signing_key(asked.env)
    return Sealing(results=results, matrix=asked.matrix, started=now(), signing=signing, unsealed=unsealed,
                   trusted=tuple(trusted))
