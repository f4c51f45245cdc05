"""What this engine provides every verification container, found once per command (`verify IMAGE` and the
build): the GPUs (discovered and said on screen, with what may still go wrong), the one GPU a container
gets, the network its server runs in and why that network is not cut, when it is not.

One home for this preamble, so that `verify IMAGE` and `nox -s build` can never give the same image
different GPUs or networks, nor say them differently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import docker

from .. import log
from . import gpus
from .container import network_plan


@dataclass(frozen=True)
class Provision:
    discovery: gpus.Discovery
    options: dict[str, Any]     # docker `run` options: the GPU (one, or none), shm, limits and the network
    network: dict[str, Any]     # the network options alone (containers per GPU take their own GPU)
    handed: gpus.Handed         # the GPU `options` give: the only GPU facts a container's results may carry
    cut_problem: str | None     # why the server keeps a network, when it does


def find(client: docker.DockerClient, gpu: int, info: Mapping[str, Any] | None = None, *, all_gpus: bool = False,
         shm_size: str = gpus.SHM_SIZE) -> Provision:
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


def say(discovery: gpus.Discovery, before: str = "") -> None:
    """The GPUs found (after `before`, e.g. the run's line), then each warning about them."""
    log.info(before + discovery.summary())
    for warning in discovery.warnings:
        log.warn(warning)
