"""GPUs on the runner: which ones, whether Docker can hand them to containers, and how to ask.

`discover()` looks once per run (nvidia-smi for the GPUs and the driver; `docker info` runtimes and
CDI spec folders for the engine's side). `container_options()` gives the docker SDK `run` keyword
arguments for one GPU, all GPUs, or none; `per_gpu()` runs one verification per GPU side by side.
When no GPU can be handed over, containers get PROBE_NO_GPU_REASON so that the probe's GPU stages
are SKIPPED with the host's reason instead of a vague "no device".
"""

from __future__ import annotations

import glob
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from docker.types import DeviceRequest, Ulimit

from . import proc
from .errors import GpuError
from .results import StageResult, Status

if TYPE_CHECKING:
    from .config import Profile
    from .matrix import Cell

NO_GPU_ENV = "PROBE_NO_GPU_REASON"   # read by the probe's gpu-visible stage
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
SMI_QUERY = "index,name,uuid,compute_cap,driver_version,memory.total"
# /dev/shm is 64 MB by default in Docker; NCCL and SGLang's shared-memory queues need far more
# (a too-small /dev/shm is a known NCCL failure: "Error while creating shared memory segment").
SHM_SIZE = "16g"
STACK_BYTES = 64 * 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    capability: str      # "9.0"
    driver: str          # "580.159.04"
    memory_mib: int

    @property
    def arch(self) -> str:
        major, _, minor = self.capability.partition(".")
        return f"sm_{major}{minor or '0'}"


@dataclass(frozen=True)
class Discovery:
    gpus: tuple[Gpu, ...] = ()
    runtime: str | None = None          # "nvidia" (runtime) or "cdi": how containers get GPUs
    problem: str | None = None          # why GPU stages cannot run in containers here
    details: dict[str, str] = field(default_factory=dict)

    @property
    def usable_in_containers(self) -> bool:
        return bool(self.gpus) and self.runtime is not None

    def summary(self) -> str:
        if not self.gpus:
            return f"no GPU: {self.problem}"
        names = ", ".join(f"{g.index}: {g.name} ({g.arch})" for g in self.gpus)
        how = f"via {self.runtime}" if self.runtime else f"not usable in containers: {self.problem}"
        return f"{len(self.gpus)} GPU(s) [{names}], driver {self.gpus[0].driver}, {how}"


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """Rows of `nvidia-smi --query-gpu=SMI_QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6 or not cells[0].isdigit():
            continue
        memory = int(float(cells[5])) if cells[5].replace(".", "", 1).isdigit() else 0
        gpus.append(Gpu(int(cells[0]), cells[1], cells[2], cells[3], cells[4], memory))
    return tuple(gpus)


def container_runtime(info: Mapping[str, Any], cdi_specs: Sequence[str]) -> str | None:
    """How the engine hands GPUs over: its nvidia runtime, else CDI specs for nvidia.com/gpu."""
    if "nvidia" in (info.get("Runtimes") or {}):
        return "nvidia"
    if any("nvidia" in spec for spec in cdi_specs):
        return "cdi"
    return None


def discover(docker_info: Mapping[str, Any] | None) -> Discovery:
    """GPUs and the engine's GPU support. `docker_info` is `client.info()`, or None in host mode."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Discovery(problem="nvidia-smi not found on PATH (no NVIDIA driver on this runner)")
    done = proc.run([smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"], timeout=60)
    if not done.ok:
        return Discovery(problem=f"nvidia-smi failed: {done.tail(3)}")
    gpus = parse_nvidia_smi(done.output)
    if not gpus:
        return Discovery(problem="nvidia-smi lists no GPU")
    if docker_info is None:
        return Discovery(gpus=gpus, runtime="host")
    specs = [p for d in CDI_DIRS for p in glob.glob(f"{d}/*") if p.endswith((".json", ".yaml", ".yml"))]
    runtime = container_runtime(docker_info, specs)
    problem = None if runtime else (
        "the Docker engine has no nvidia runtime and no CDI spec for nvidia.com/gpu; install the NVIDIA "
        "Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker`")
    return Discovery(gpus=gpus, runtime=runtime, problem=problem, details={"cdi_specs": " ".join(specs)})


def container_options(discovery: Discovery, gpu: int | None = None, *, all_gpus: bool = False,
                      shm_size: str = SHM_SIZE) -> dict[str, Any]:
    """docker SDK `containers.run` kwargs: GPUs (one, all, or none), shared memory, memlock/stack limits."""
    options: dict[str, Any] = {"shm_size": shm_size, "environment": {}}
    if not discovery.usable_in_containers:
        options["environment"][NO_GPU_ENV] = discovery.problem or "no GPU on this runner"
        return options
    if gpu is None and not all_gpus:
        options["environment"][NO_GPU_ENV] = "no GPU requested for this container"
        return options
    chosen = [g for g in discovery.gpus if all_gpus or g.index == gpu]
    if not chosen:
        known = ", ".join(str(g.index) for g in discovery.gpus)
        msg = f"GPU {gpu} does not exist on this runner (GPUs: {known or 'none'})"
        raise GpuError(msg, hint="list them with `nvidia-smi -L` and pick one of those indexes")
    # Pinned host memory (NCCL, CUDA IPC) needs an unlimited memlock and PyTorch wants a big stack.
    # Only GPU containers ask for them: a runtime may refuse to raise rlimits (rootless, nested).
    options["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1),
                          Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES)]
    if discovery.runtime == "cdi":
        ids = [f"nvidia.com/gpu={g.index}" for g in chosen]
        options["device_requests"] = [DeviceRequest(driver="cdi", device_ids=ids)]
    else:
        options["device_requests"] = [DeviceRequest(device_ids=[str(g.index) for g in chosen],
                                                    capabilities=[["gpu"]])]
        options["environment"]["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    return options


def per_gpu(discovery: Discovery, verify_one: Callable[[Gpu], T]) -> list[T]:
    """Run `verify_one` once per GPU, side by side (one container or process per GPU), in GPU order."""
    if not discovery.gpus:
        return []
    with ThreadPoolExecutor(max_workers=len(discovery.gpus), thread_name_prefix="gpu") as pool:
        return list(pool.map(verify_one, discovery.gpus))


def verify_cell_per_gpu(image: str, cell: Cell, discovery: Discovery, *, logs: Path, run_id: str,
                        profile: Profile | None = None,
                        stages: Sequence[str] | None = None) -> dict[int, list[StageResult]]:
    """Per-GPU mode: one container per GPU, side by side (as users run one server per GPU),
    each verified with the ladder; {gpu index: its stage results}. Logs go to logs/gpu<i>/."""
    from . import verify  # verify imports the probe; keep `gpus` light for discovery-only callers

    def one(gpu: Gpu) -> list[StageResult]:
        return verify.verify_cell(image, cell, logs=logs / f"gpu{gpu.index}", stages=stages, profile=profile,
                                  run_id=run_id, container_options=container_options(discovery, gpu.index))

    return dict(zip([g.index for g in discovery.gpus], per_gpu(discovery, one), strict=True))


def combine_per_gpu(by_gpu: Mapping[int, Sequence[StageResult]]) -> list[StageResult]:
    """One ladder from several GPUs' ladders: a stage passes only where it passed on every GPU.

    The first GPU's results stand unless another GPU did worse at that stage; then that GPU's
    result stands, its reason naming the GPU. Each stage's evidence lists the status per GPU.
    """
    rank = {Status.PASSED: 0, Status.SKIPPED: 1, Status.ABORTED: 2, Status.FAILED: 3}
    first, *_ = by_gpu.values()
    combined = []
    for position, stage in enumerate(first):
        per = {i: stages[position] for i, stages in by_gpu.items() if position < len(stages)}
        index, worst = max(per.items(), key=lambda item: rank[item[1].status])
        chosen = stage if rank[worst.status] <= rank[stage.status] else worst.model_copy(
            update={"reason": f"on GPU {index}: {worst.reason or worst.status.value}"})
        evidence = {**chosen.evidence, "per_gpu": {str(i): s.status.value for i, s in per.items()}}
        combined.append(chosen.model_copy(update={"evidence": evidence}))
    return combined


def host_env(gpu: Gpu) -> dict[str, str]:
    """Environment that pins a host-mode probe to one GPU (the per-GPU mode without Docker)."""
    return {"CUDA_VISIBLE_DEVICES": gpu.uuid or str(gpu.index)}
