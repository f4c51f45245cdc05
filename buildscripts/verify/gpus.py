"""GPUs on the runner: which ones, whether Docker can hand them to containers, and how to ask.

`discover()` looks once per run (nvidia-smi for the GPUs and the driver; `docker info` runtimes and
CDI spec folders for the engine's side). `container_options()` gives the docker SDK `run` keyword
arguments for one GPU, all GPUs, or none (per-GPU verification lives in `per_gpu_containers`).
When no GPU can be handed over, containers get PROBE_NO_GPU_REASON so that the probe's GPU stages
are SKIPPED with the host's reason instead of a vague "no device".
"""

from __future__ import annotations

import glob
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from .. import proc
from ..errors import GpuError
from .asked import SHM_SIZE

NO_GPU_ENV = "PROBE_NO_GPU_REASON"   # read by the probe's gpu-visible stage
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")   # where nvidia-ctk writes specs, when the engine does not say
CDI_KIND = "nvidia.com/gpu"
SMI_QUERY = "index,name,uuid,compute_cap,driver_version,memory.total"
STACK_BYTES = 64 * 1024 * 1024
DRIVER_CAPABILITIES = "compute,utility"   # what the NVIDIA runtime mounts into a GPU container: CUDA and nvidia-smi
# Why an engine cannot hand GPUs to containers, and the fix (said by the verifier's discovery and by `here`).
CDI_OFF = ("a CDI spec for nvidia.com/gpu exists, but the Docker engine has CDI off",
           'set `"features": {"cdi": true}` in /etc/docker/daemon.json (Docker 25+) and restart it')
NO_GPU_RUNTIME = ("the Docker engine has no nvidia runtime and no CDI spec for nvidia.com/gpu",
                  "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker` (or "
                  "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` on an engine with CDI on)")


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
    warnings: tuple[str, ...] = ()      # what may still go wrong in the containers (said before the first cell)

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


def container_runtime(info: Mapping[str, Any], cdi_kinds: Sequence[str]) -> str | None:
    """How the engine hands GPUs over: its nvidia runtime, else CDI, when the engine has CDI on (it then
    lists its spec folders) and a spec there declares the kind nvidia.com/gpu."""
    if "nvidia" in (info.get("Runtimes") or {}):
        return "nvidia"
    if info.get("CDISpecDirs") and CDI_KIND in cdi_kinds:
        return "cdi"
    return None


def read_cdi_specs(dirs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """{spec file: its content} for the readable CDI specs in `dirs` (JSON is YAML too)."""
    found: dict[str, dict[str, Any]] = {}
    for folder in dirs:
        for path in sorted(glob.glob(f"{folder}/*")):
            if not path.endswith((".json", ".yaml", ".yml")):
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    data = yaml.safe_load(fh)
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue
            if isinstance(data, dict) and isinstance(data.get("kind"), str):
                found[path] = data
    return found


def cdi_specs(dirs: Sequence[str]) -> dict[str, str]:
    """{spec file: the device kind it declares}."""
    return {path: str(data["kind"]) for path, data in read_cdi_specs(dirs).items()}


def refreshes_ld_cache(spec: Mapping[str, Any]) -> bool:
    """Whether a CDI spec runs ldconfig in the container (nvidia-ctk's update-ldcache hook does). Without it
    the driver's mounted libcuda.so.1 is missing from the ld cache and Triton fails at the first launch."""
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    hooks = [h for e in edits for h in e.get("hooks") or []]
    return any("ldcache" in " ".join(h.get("args") or []) or str(h.get("path", "")).endswith("ldconfig")
               for h in hooks)


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
    read = read_cdi_specs(docker_info.get("CDISpecDirs") or CDI_DIRS)
    runtime, problem, warnings = engine_support(docker_info, read)
    specs = {path: str(data["kind"]) for path, data in read.items()}
    said = f"{problem[0]}{'; ' if problem is NO_GPU_RUNTIME else ': '}{problem[1]}" if problem else None
    return Discovery(gpus=gpus, runtime=runtime, problem=said, details={"cdi_specs": " ".join(specs)},
                     warnings=warnings)


Support = tuple[str | None, tuple[str, str] | None, tuple[str, ...]]   # (runtime, (problem, fix), warnings)


def engine_support(docker_info: Mapping[str, Any], specs: Mapping[str, Mapping[str, Any]]) -> Support:
    """(how the engine hands GPUs over, why it cannot and the fix, what may still go wrong) from `docker info` and
    the CDI specs read (`read_cdi_specs`): the verifier's discovery and `here` say it in the same words."""
    kinds = [str(data["kind"]) for data in specs.values()]
    runtime = container_runtime(docker_info, kinds)
    problem = None
    if runtime is None:
        problem = CDI_OFF if CDI_KIND in kinds else NO_GPU_RUNTIME
    warnings: tuple[str, ...] = ()
    if runtime == "cdi" and not any(refreshes_ld_cache(d) for d in specs.values() if d.get("kind") == CDI_KIND):
        warnings = ("the CDI spec for nvidia.com/gpu has no hook that refreshes the container's ld cache: Triton "
                    "will not find libcuda.so.1 (regenerate it with `nvidia-ctk cdi generate`)",)
    return runtime, problem, warnings


@dataclass(frozen=True)
class Handed:
    """The GPUs the host gave one verification (or has itself, in host and LXC mode): the only source of
    the GPU facts its results carry, whatever the probe inside says (verify/claims.py)."""

    gpus: tuple[Gpu, ...] = ()
    why_none: str = "no GPU on this runner"   # when `gpus` is empty: the reason the GPU stages get


def handed(discovery: Discovery, gpu: int | None = None, *, all_gpus: bool = False) -> Handed:
    """What a container is given: GPU `gpu`, all of them, or none (with the reason)."""
    if not discovery.usable_in_containers:
        return Handed(why_none=discovery.problem or "no GPU on this runner")
    if gpu is None and not all_gpus:
        return Handed(why_none="no GPU requested for this container")
    chosen = tuple(g for g in discovery.gpus if all_gpus or g.index == gpu)
    if not chosen:
        known = ", ".join(str(g.index) for g in discovery.gpus)
        msg = f"GPU {gpu} does not exist on this runner (GPUs: {known or 'none'})"
        raise GpuError(msg, hint="list them with `nvidia-smi -L` and pick one of those indexes")
    return Handed(chosen)


def on_host(discovery: Discovery, env: Mapping[str, str]) -> Handed:
    """The GPUs a probe on this machine (host mode, an LXC container here) can use: all of them, or those
    CUDA_VISIBLE_DEVICES names (indexes or UUIDs) in the environment it gets."""
    if not discovery.gpus:
        return Handed(why_none=discovery.problem or "no GPU on this runner")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return Handed(discovery.gpus)
    names = {v.strip() for v in visible.split(",") if v.strip()}
    chosen = tuple(g for g in discovery.gpus if str(g.index) in names or g.uuid in names)
    return Handed(chosen, why_none=f"CUDA_VISIBLE_DEVICES={visible!r} names none of this machine's GPUs")


def container_options(discovery: Discovery, gpu: int | None = None, *, all_gpus: bool = False,
                      shm_size: str = SHM_SIZE) -> dict[str, Any]:
    """docker SDK `containers.run` kwargs: GPUs (one, all, or none), shared memory, memlock/stack limits."""
    from docker.types import DeviceRequest, Ulimit  # the SDK where a container is made, not at import (cli.py)

    options: dict[str, Any] = {"shm_size": shm_size, "environment": {}}
    given = handed(discovery, gpu, all_gpus=all_gpus)
    chosen = given.gpus
    if not chosen:
        options["environment"][NO_GPU_ENV] = given.why_none
        return options
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
        options["environment"]["NVIDIA_DRIVER_CAPABILITIES"] = DRIVER_CAPABILITIES
    return options


def host_env(gpu: Gpu) -> dict[str, str]:
    """Environment that pins a host-mode probe to one GPU (the per-GPU mode without Docker)."""
    return {"CUDA_VISIBLE_DEVICES": gpu.uuid or str(gpu.index)}
