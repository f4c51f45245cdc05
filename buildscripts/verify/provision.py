"""Provisioning: what this engine (or this machine) provides every verification of a command, found once (the
GPUs, discovered and said on screen with what may still go wrong; the GPU a container gets; the network its
server runs in and why that network is not cut, when it is not), and the one request each verification is then
made from (request.py): the plan for its targets, with the GPUs and the names.

One home for this preamble, so that `verify IMAGE` and `nox -s build` can never give the same image different
GPUs, networks or plans, nor say them differently.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import engine, log
from ..errors import ConfigError
from ..lxc.privileged import why_unsealed
from ..matrix import Cell, platforms
from ..matrix.schema import LABEL_PREFIX, Profile
from ..results import ImageInfo
from ..trust import keys
from ..workspace import checked_name
from . import gpus, identity, pulled, tp
from .asked import SHM_SIZE, Asked, Place
from .container import network_plan
from .one_image import image_facts
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


def for_verify(asked: Asked, place: Place, *, cell_id: str | None, out: Path,
               trust_keys: Sequence[Path]) -> tuple[VerificationRequest, docker.DockerClient | None]:
    """The request of `verify` (and the engine client an image needs): an image, pulled by digest first where
    `place` says so and its facts read once; this machine's Python; or a running LXC container, its cell read from
    the labels it carries. Each gets the GPUs the engine or machine provides, the one plan, and who seals its
    record (none for a run that vouches for nothing: no key is read for it)."""
    profile = asked.matrix.profile(asked.profile)
    if place.host and not identity.is_root():
        msg = (f"verify --host as uid {os.geteuid()} would run the code under test as this user, who can read "
               "this user's keys, and plant one where a verifier would later take it")
        raise ConfigError(msg, hint="run it as root (the code under test then runs as an identity of its own), "
                                    "or verify an image in a container (`nox -s verify -- IMAGE`)")
    client = None if place.host or place.target else engine.connect()
    if client is None:
        request = _in_place(asked, place, profile, cell_id)
        unsealed = (why_unsealed(place.target) if place.target
                    else identity.why_unsealed(place.python or sys.executable))
    else:
        request, unsealed = _of_image(client, asked, place, profile, cell_id), None
    trusted = tuple(keys.trusted(asked.ws.root, asked.env, trust_keys)) if place.target else ()
    # the key that seals the record: a bad one is said now, not after the ladder; none is read for a run that
    # vouches for nothing (host mode with no boundary between the code under test and the keys)
    signing = None if unsealed else keys.signing_key(asked.env)
    sealing = Sealing(results=out, signing=signing, unsealed=unsealed, trusted=trusted)
    return replace(request, sealing=sealing), client


def _of_image(client: docker.DockerClient, asked: Asked, place: Place, profile: Profile,
              cell_id: str | None) -> VerificationRequest:
    """An image: pulled by digest first (`place.pull`), then by id, whose facts are read once here."""
    image = str(place.image)
    source = pulled.pull(client, image, asked.env, log_file=asked.run_dir / "pull.log") if place.pull else None
    local = source.id if source and source.id else image   # by id from here: nothing can move under it
    facts = image_facts(client, local)
    label = facts.labels.get(f"{LABEL_PREFIX}.cell", "adhoc")
    # The image's cell label names its log folder: an image is input too, and may carry any text there.
    checked_name(label, f"the cell label of {image}")
    given = find(client, asked.gpu, all_gpus=tp.wants_all_gpus(profile), shm_size=asked.shm_size)
    say(given.discovery)
    # --cell-id naming a matrix cell: verified as that cell (its axes, targets, lane and expectation), e.g. an
    # image built elsewhere for it; its label may name another, and the gate compares axes with the matrix.
    cell = (asked.matrix.cell(cell_id) if cell_id else None) or asked.matrix.cell(label)
    chosen = plan(asked, profile, cell=cell, labels=facts.labels, also_archs=asked.matrix.spec.targets().also_audit)
    made = request(asked, given, chosen, cell_id=cell_id or label, cell=cell, facts=facts,
                   place=replace(place, image=local))
    return replace(made, pulled=source)


def _in_place(asked: Asked, place: Place, profile: Profile, cell_id: str | None) -> VerificationRequest:
    """This machine's Python (`--host`), or a running LXC container, whose cell comes from the labels it carries
    (/etc/sglang-images/cell.json, which every image of this project has and an export keeps)."""
    here_targets = asked.matrix.spec.targets(_host_platform()).also_audit
    if place.target is None:
        python = place.python or sys.executable
        given = here({**os.environ, **asked.env})
        chosen = plan(asked, profile, also_archs=here_targets)
        facts = ImageInfo(ref="host", id=f"host:{python}")
        return request(asked, given, chosen, cell_id=checked_name(cell_id or "host", "cell id"), facts=facts,
                       place=replace(place, python=python))
    target = place.target
    labels = target.cell_labels()
    given = here({})
    image_cell = labels.get(f"{LABEL_PREFIX}.cell", "")
    # Its own row in reports (a run in place is not a run of the image), named after the image's cell; the cell's
    # declared expected failure applies in place too.
    named = checked_name(cell_id or f"{image_cell or 'lxc'}@{target.tool}-{target.ident}", "cell id")
    where = f"lxc:{target.tool}:{target.ident}"
    return request(asked, given, plan(asked, profile, labels=labels, also_archs=here_targets), cell_id=named,
                   cell=asked.matrix.cell(image_cell), facts=ImageInfo(ref=where, id=where, labels=labels),
                   place=replace(place, python=place.python or "python3"))


def _host_platform() -> str:
    """The platform of this host (in place, host and LXC runs are this machine's platform)."""
    found = platforms.host()
    return found.oci if found else platforms.DEFAULT
