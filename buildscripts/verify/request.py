"""A verification asked once and passed whole: the build's of each cell, `verify`'s of its image or place.

Provisioning (provision.py) makes a `VerificationRequest` of a command's options (asked.py), once per cell: with
what this engine or machine provides (`Provision`: the GPUs handed over, the container's options, its network) and
what is verified (the plan for its targets, the cell, the image's facts). verify_image, check_image, the per-GPU
containers and the runs in place take that request whole; a runner gets the part it needs (`runner_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .asked import Place
from .gpus import Discovery, Gpu, Handed
from .plan import Plan
from .runner import Options

if TYPE_CHECKING:
    from ..matrix import Cell, Matrix
    from ..results import ImageInfo
    from ..trust.keys import PublicKey, SigningKey
    from .carry import Carried


@dataclass(frozen=True, kw_only=True)
class Provision:
    """What the engine (or this machine) gives every verification of one command, found once (provision.py)."""

    discovery: Discovery
    options: Mapping[str, Any] = field(default_factory=dict)   # docker `run` options: GPU, shm, limits, network
    network: Mapping[str, Any] = field(default_factory=dict)   # the network options alone (per GPU: own GPUs)
    handed: Handed = field(default_factory=Handed)   # the GPUs `options` give: the only GPU facts results may carry
    cut_problem: str | None = None                   # why the server keeps a network, when it does


@dataclass(frozen=True, kw_only=True)
class Sealing:
    """Who vouches for a verification's record, and where it is written (`verify`'s: the build seals its run's)."""

    results: Path                           # the results file the sealed record is saved into
    matrix: Matrix                          # judged against: the file's digest, the cell's definition
    started: str                            # when the run began
    signing: SigningKey | None = None       # seals the record; None: it vouches for nothing, `unsealed` says why
    unsealed: str | None = None
    trusted: tuple[PublicKey, ...] = ()     # whose seals and signed verdicts count


@dataclass(frozen=True, kw_only=True)
class VerificationRequest:
    """One verification, whole: what runs, on which GPUs, as which cell, and where its log goes."""

    plan: Plan                          # stages, targets, lane, server profile, each stage's deadline
    provision: Provision                # the GPU selection and the container's options
    cell_id: str                        # names the record and the log folder
    logs: Path                          # this verification's log folder: probe.log (per GPU: gpuN/probe.log)
    run_id: str = "manual"
    cell: Cell | None = None            # the matrix cell it is verified as: its axes and expected failure
    gpu: int = 0                        # the GPU index asked for (the reuse key names it)
    per_gpu: bool = False               # one container per GPU, side by side (the build's --per-gpu)
    keep: bool = False                  # leave a container behind for debugging
    facts: ImageInfo | None = None      # the image's facts, read once by whoever made the request
    pulled: ImageInfo | None = None     # where the image came from by digest (verify/pulled.py)
    place: Place = field(default_factory=Place)   # where it runs (the build: a container of the image it built)
    sealing: Sealing | None = None      # `verify`'s record (the build seals its run's records itself)
    env: Mapping[str, str] = field(default_factory=dict)   # the verifier's environment (a host run's is from it)
    carried: Carried | None = None      # the build runner's CPU stages standing for this run's (verify/carry.py)
    carry_refused: str | None = None    # why the records given with --cpu-record do not (the record's notes say so)

    @property
    def notes(self) -> list[str]:
        """What the record notes of the request itself: CPU records given and not carried."""
        return [f"--cpu-record not used, the CPU stages ran here: {self.carry_refused}"] if self.carry_refused else []

    @property
    def log_file(self) -> Path:
        return self.logs / "probe.log"

    def runner_options(self) -> Options:
        """What a runner is given of the request (runner.py)."""
        return Options(plan=self.plan, log_file=self.log_file, handed=self.provision.handed, run_id=self.run_id,
                       cell_id=self.cell_id, keep=self.keep)

    def on_gpu(self, gpu: Gpu, options: Mapping[str, Any]) -> VerificationRequest:
        """The request of one container of the per-GPU path: that GPU alone, its own log folder."""
        given = replace(self.provision, options={**options, **self.provision.network}, handed=Handed((gpu,)))
        return replace(self, provision=given, logs=self.logs / f"gpu{gpu.index}", per_gpu=False)
