"""This machine as `here` reads it (through facts.py only): its CPU platform, its GPUs and driver, and how an
image would run here: Docker (with the NVIDIA runtime or CDI), inside an LXC / Proxmox container, or on a Proxmox
host that makes such containers.

- GPUs: `nvidia-smi --query-gpu=… --format=csv,noheader,nounits`, the same query and reader as the verifier's
  (verify/gpus.py), so arch, product and driver are named alike everywhere; no NVML binding is needed.
- Docker: `docker info` (its runtimes, whether CDI is on and where its specs are) and the CDI specs themselves,
  judged by the verifier's own rule (`engine_support`).
- LXC: `container=lxc` in init's environment (or systemd's /run/systemd/container), the user namespace's id map
  (/proc/self/uid_map: `0 100000 65536` is an unprivileged container, `0 0 4294967295` a privileged one), the
  /dev/nvidia* nodes handed in, the size of /dev/shm and whether the loopback is up.
- A Proxmox VE host: `pct` and the cluster file system /etc/pve.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .. import platform_reading
from ..lxc.root_access import GPU_NODE
from ..verify import gpus as gpu_query
from ..verify.gpus import Gpu
from .facts import Facts

SMI = ("nvidia-smi", f"--query-gpu={gpu_query.SMI_QUERY}", "--format=csv,noheader,nounits")
DOCKER_INFO = ("docker", "info", "--format", "{{json .}}")
SHM = ("df", "-Pk", "/dev/shm")
FULL_MAP = 4294967295      # a privileged container's (and the host's) uid map: 0 0 4294967295


@dataclass(frozen=True)
class Problem:
    """A "no" about this machine, and the one line that fixes it."""

    what: str      # a short name: gpu, docker, lxc-nodes, shm, loopback, …
    said: str
    fix: str


@dataclass(frozen=True)
class DockerSide:
    """The Docker engine here: how it hands GPUs to containers ("nvidia" or "cdi"), or why it cannot."""

    runtime: str | None
    problem: Problem | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class InLxc:
    """This machine is an LXC container (a Proxmox CT or plain LXC): what it was given."""

    unprivileged: bool | None      # None: the id map could not be read
    uid_map: str                   # its first line, as the kernel wrote it
    shm_bytes: int | None          # the size of /dev/shm (None: unreadable)
    loopback_up: bool | None


@dataclass(frozen=True)
class Machine:
    platform: str                          # linux/amd64, as an index names it
    gpus: tuple[Gpu, ...]
    gpu_problem: Problem | None            # why no GPU could be read
    nodes: tuple[str, ...]                 # the /dev/nvidia* nodes here
    docker: DockerSide | None              # None: no docker program here
    lxc: InLxc | None                      # None: not inside an LXC container
    proxmox_host: bool                     # pct and /etc/pve: a Proxmox VE host

    def gpu(self, index: int | None) -> Gpu | None:
        """GPU `index` (default the first); None when there is no such GPU."""
        if index is None:
            return self.gpus[0] if self.gpus else None
        return next((g for g in self.gpus if g.index == index), None)

    def runtime_words(self) -> str:
        if self.lxc is not None:
            kind = {True: "an unprivileged", False: "a privileged", None: "an"}[self.lxc.unprivileged]
            where = f"{kind} LXC container"
        elif self.proxmox_host:
            where = "a Proxmox VE host"
        else:
            where = "a host"
        if self.docker is None:
            return f"{where}, no Docker"
        how = {"nvidia": "the NVIDIA runtime", "cdi": "CDI (nvidia.com/gpu)"}.get(self.docker.runtime or "")
        return f"{where}, Docker with {how}" if how else f"{where}, Docker without a GPU runtime"


def read(facts: Facts) -> Machine:
    in_lxc = inside_lxc(facts)
    found, problem = read_gpus(facts, in_lxc)
    return Machine(platform=read_platform(facts), gpus=found, gpu_problem=problem,
                   nodes=tuple(n for n in facts.names("/dev", "nvidia*") if GPU_NODE.fullmatch(n)),
                   docker=read_docker(facts),
                   lxc=read_lxc(facts) if in_lxc else None,
                   proxmox_host=facts.exists("/usr/sbin/pct") and facts.exists("/etc/pve"))


def read_platform(facts: Facts) -> str:
    """`uname -m` as an index names it (x86_64 is linux/amd64, aarch64 linux/arm64)."""
    ran = facts.run(["uname", "-m"])
    if ran is None or not ran.ok or not ran.output.strip():
        return platform_reading.machine()
    name = ran.output.strip().splitlines()[-1].strip().lower()
    return f"linux/{platform_reading.UNAME.get(name, name)}"


def read_gpus(facts: Facts, in_lxc: bool) -> tuple[tuple[Gpu, ...], Problem | None]:
    ran = facts.run(list(SMI))
    if ran is None:
        fix = ("in the container, install the host driver's user space of the host's very version without its "
               "kernel module (NVIDIA-Linux-ARCH-VERSION.run --no-kernel-module), or use LXC's nvidia hook"
               if in_lxc else "install the NVIDIA driver (its nvidia-smi comes with it), then run `here` again")
        return (), Problem("gpu", "no nvidia-smi here: no NVIDIA driver to read a GPU from", fix)
    found = gpu_query.parse_nvidia_smi(ran.output) if ran.ok else ()
    if found:
        return found, None
    said = ran.output.strip().splitlines()[-1] if ran.output.strip() else f"exit {ran.returncode}"
    if "version mismatch" in said.lower():
        fix = "the driver's kernel module and user space differ: reboot after the driver update, or reinstall it"
    elif in_lxc:
        fix = ("the container cannot open the GPU's nodes: on the host, `sglang-images preflight --ctid CTID` names "
               "the lines to add to /etc/pve/lxc/CTID.conf")
    else:
        fix = "check the driver (`nvidia-smi`); reinstall it, or reboot after an update"
    return (), Problem("gpu", f"nvidia-smi lists no GPU: {said}", fix)


def docker_info(facts: Facts) -> tuple[dict[str, Any] | None, str]:
    """`docker info` as JSON, or None and what the engine said; ({}, "") when there is no docker program."""
    ran = facts.run(list(DOCKER_INFO))
    if ran is None:
        return {}, ""
    line = next((ln for ln in reversed(ran.output.splitlines()) if ln.startswith("{")), "")
    try:
        info = json.loads(line) if ran.ok and line else None
    except ValueError:
        info = None
    if isinstance(info, dict) and not info.get("ServerErrors"):
        return info, ""
    errors = info.get("ServerErrors") if isinstance(info, dict) else None
    return None, "; ".join(map(str, errors)) if errors else (ran.output.strip().splitlines() or ["no answer"])[-1]


def read_docker(facts: Facts) -> DockerSide | None:
    info, said = docker_info(facts)
    if info == {}:
        return None
    if info is None:
        fix = ("add your user to the docker group (`sudo usermod -aG docker $USER`, then log in again), or run as "
               "root" if "permission denied" in said.lower() else "start the engine (`sudo systemctl start docker`)")
        return DockerSide(None, Problem("docker", f"the Docker engine does not answer: {said}", fix))
    dirs = info.get("CDISpecDirs") or gpu_query.CDI_DIRS
    specs = gpu_query.read_cdi_specs([str(facts.path(str(d))) for d in dirs])
    runtime, problem, warnings = gpu_query.engine_support(info, specs)
    return DockerSide(runtime, Problem("docker", *problem) if problem else None, warnings)


def inside_lxc(facts: Facts) -> bool:
    environ = (facts.read("/proc/1/environ") or "").split("\0")
    return "container=lxc" in environ or (facts.read("/run/systemd/container") or "").strip() == "lxc"


def read_lxc(facts: Facts) -> InLxc:
    first = next(iter((facts.read("/proc/self/uid_map") or "").strip().splitlines()), "")
    fields = first.split()
    unprivileged = None
    if len(fields) == 3 and all(f.isdigit() for f in fields):
        unprivileged = not (fields[0] == "0" and fields[1] == "0" and int(fields[2]) >= FULL_MAP)
    flags = re.fullmatch(r"\s*0x([0-9a-f]+)\s*", facts.read("/sys/class/net/lo/flags") or "", re.I)
    return InLxc(unprivileged, " ".join(fields), shm_bytes(facts),
                 bool(int(flags.group(1), 16) & 1) if flags else None)


def shm_bytes(facts: Facts) -> int | None:
    """The size of /dev/shm from `df -Pk` (its 1024-blocks column)."""
    ran = facts.run(list(SHM))
    rows = [line.split() for line in (ran.output.splitlines()[1:] if ran is not None and ran.ok else [])]
    sizes = [int(row[1]) for row in rows if len(row) > 1 and row[1].isdigit()]
    return sizes[0] * 1024 if sizes else None
