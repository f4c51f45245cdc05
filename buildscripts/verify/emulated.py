"""Verifying another CPU's image on this host (an arm64 image on x86_64): under QEMU user emulation.

Every stage that needs no GPU runs for real, inside the image, on its own binaries (its Python, its nvcc), only
slower; the record says so (each such stage's `where` reads "under emulation", and the facts stage's evidence
names the platforms). QEMU 7.2 (Debian bookworm) shows a foreign process the host's /proc/cpuinfo: an x86_64 one,
which the cpuinfo library inside torch cannot parse for an arm64 CPU (`import torch` dies of SIGSEGV in
cpuinfo_arm_linux_init, pytorch/pytorch#188255), so the container sees an arm64 one instead
(data/cpuinfo-aarch64: two Neoverse V2 cores, Grace's). This host's GPUs are not handed to it: their driver
libraries are this CPU's, which the image cannot load, so every GPU stage is SKIPPED with that reason, never
passed. On a host of the image's own CPU nothing here applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..build import emulation
from ..matrix.platforms import CPUS, Cpu, host
from ..matrix.schema import LABEL_PREFIX
from ..results import StageResult, Status
from .gpus import NO_GPU_ENV, Handed
from .plan import Plan

MARK = "under emulation"
# How much longer a stage may take under emulation: measured on the 2-core x86_64 builder, with the layers' bytecode
# in the image the import stage took 130 s (278 s without) and the JIT stage 292 s with its compiles side by side
# (665 s one after another), against ~8 s and ~31 s on amd64, and a loaded machine doubles that
# (benchmarks/arm64-results.md): 3600 s keeps a margin.
SLOWDOWN = 4
PLATFORM_LABEL = f"{LABEL_PREFIX}.platform"
CPUINFO = {"linux/arm64": Path(__file__).resolve().parent.parent / "data" / "cpuinfo-aarch64"}


def foreign(labels: Mapping[str, str], machine: str | None = None) -> Cpu | None:
    """The CPU of an image this host runs only under emulation, from the platform label this project's builds
    put on every image of a platform but linux/amd64 (buildx.cell_metadata); None for this host's own."""
    platform = labels.get(PLATFORM_LABEL)
    cpu = next((c for c in CPUS if c.oci == platform), None)
    return cpu if cpu is not None and emulation.needed(cpu, machine) else None


def no_gpu(cpu: Cpu, options: Mapping[str, Any] | None, machine: str | None = None) -> tuple[dict[str, Any], Handed]:
    """The container's options without GPUs, and the reason its GPU stages get."""
    here = host(machine)
    why = (f"no {cpu.oci} GPU here: this {here.oci if here else 'host'} machine runs the image under QEMU "
           f"emulation, and its GPU driver is for its own CPU (verify on a {cpu.oci} GPU machine)")
    kept = {k: v for k, v in (options or {}).items() if k not in ("device_requests", "runtime", "ulimits")}
    kept["environment"] = {**{k: v for k, v in dict(kept.get("environment") or {}).items()
                              if k != "NVIDIA_DRIVER_CAPABILITIES"}, NO_GPU_ENV: why}
    cpuinfo = CPUINFO.get(cpu.oci)
    if cpuinfo is not None:
        kept["volumes"] = [*kept.get("volumes", []), (str(cpuinfo), "/proc/cpuinfo", "ro")]
    return kept, Handed(why_none=why)


def mark(stages: Sequence[StageResult], cpu: Cpu, machine: str | None = None) -> list[StageResult]:
    """Say "under emulation" on every stage that ran; the facts stage names the platforms."""
    here = host(machine)
    note = {"platform": cpu.oci, "host": here.oci if here else "unknown", "handler": f"qemu-{cpu.qemu}"}
    marked = []
    for s in stages:
        update: dict[str, Any] = {}
        if s.status in (Status.PASSED, Status.FAILED) and MARK not in s.where:
            where = s.where
            update["where"] = where[:-1] + f", {MARK})" if where.endswith(")") else f"{where} ({MARK})"
        if s.name == "facts":
            update["evidence"] = {**s.evidence, "emulation": note}
        marked.append(s.model_copy(update=update) if update else s)
    return marked


def slower(plan: Plan) -> Plan:
    """The plan with each stage's deadline stretched for emulation (the stages themselves are the same)."""
    return replace(plan, stage_timeout=plan.stage_timeout * SLOWDOWN)
