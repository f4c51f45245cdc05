"""What keeps this machine's runtime from running the image, each with its fix: the Docker engine's GPU request,
and inside an LXC container its GPU nodes, /dev/shm and loopback. These are said, not judged again: `sglang-images
preflight` (run on the LXC host) is the full, failing check of a container, and `verify --here` the ladder in place.
The fixes are the preflight's and the probe's own words (lxc/, probe/shm.py)."""

from __future__ import annotations

import re

from ..lxc.fix_hints import unprivileged_fix
from ..lxc.target import Target, config_line
from ..probe import shm
from .reading import InLxc, Machine, Problem

CT = Target("pct", "CTID")   # inside a container its id is not known: the lines name it CTID
NEEDED = ("/dev/nvidiactl", "/dev/nvidia-uvm")
DOCKER_FIX = ("install Docker Engine and the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure "
              "--runtime=docker && sudo systemctl restart docker`")


def problems(machine: Machine) -> list[Problem]:
    found: list[Problem] = []
    in_ct = machine.proxmox_host or machine.lxc is not None
    if machine.docker is None and not in_ct:
        found.append(Problem("docker", "no Docker here (the images run in a container)", DOCKER_FIX))
    if machine.docker is not None:
        if machine.docker.problem is not None:
            found.append(machine.docker.problem)
        found += [Problem("cdi", w, "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
                  for w in machine.docker.warnings]
    if machine.lxc is not None:
        found += container(machine.lxc, machine)
    return found


def container(lxc: InLxc, machine: Machine) -> list[Problem]:
    """An LXC container's own lacks, with the lines for its config on the host (/etc/pve/lxc/CTID.conf)."""
    path = str(CT.config_path())
    found: list[Problem] = []
    gpus = [n for n in machine.nodes if re.fullmatch(r"/dev/nvidia\d+", n)]
    missing = [n for n in NEEDED if n not in machine.nodes] + ([] if gpus else ["/dev/nvidia0"])
    if missing:
        lines = "; ".join(f"`dev{i}: {node}`" for i, node in enumerate(missing))
        found.append(Problem("lxc-nodes", f"the container was given no {', '.join(missing)}",
                             f"on the host, add {lines} to {path} and restart it (plain LXC: "
                             "`sglang-images preflight --lxc-name NAME` names its lines)"))
    elif lxc.unprivileged and machine.gpu_problem is not None:
        found.append(Problem("lxc-nodes", "the container is unprivileged: the host's GPU nodes show here as "
                             "nobody's, and its root opens them only through their mode",
                             unprivileged_fix("pct", path)))
    if lxc.shm_bytes is not None and lxc.shm_bytes < shm.NCCL_FLOOR:
        found.append(Problem("shm", f"/dev/shm is {lxc.shm_bytes / (1 << 20):.0f} MiB, below the 1 GiB NCCL needs "
                             "for a server on more than one GPU", shm.FIXES["lxc"]))
    if lxc.loopback_up is False:
        found.append(Problem("loopback", "the loopback is down: SGLang's processes and NCCL talk over 127.0.0.1",
                             f"on the host, add `{config_line(CT, 'lxc.net.0.flags', 'up')}` to {path} (a CT with "
                             "no network of its own), or bring lo up in its init; until then: `ip link set lo up`"))
    return found
