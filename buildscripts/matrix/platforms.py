"""Platforms: the OS/CPU an image is built for (linux/amd64, linux/arm64), and whether this host runs it natively.

One table ties the three spellings of a CPU together: the wheel platform a base is locked for
(`aarch64-manylinux_2_36`), the OCI platform an image is built and run as (`linux/arm64`) and Debian's
architecture name that debootstrap takes (`arm64`). A platform other than the host's is built and run through
QEMU user emulation (binfmt_misc; docs/platforms.md).
"""

from __future__ import annotations

import platform as _platform
from dataclasses import dataclass

DEFAULT = "linux/amd64"   # the platform of a matrix that names none (top-level `archs:`)


@dataclass(frozen=True, kw_only=True)
class Cpu:
    oci: str        # linux/arm64: docker buildx --platform, an image's manifest
    debian: str     # arm64: debootstrap --arch, dpkg
    wheel: str      # aarch64: the start of a wheel platform tag (aarch64-manylinux_2_36)
    qemu: str       # aarch64: the binfmt_misc handler that runs it elsewhere (qemu-aarch64)
    # GitHub Actions: the architecture label every self-hosted runner of this CPU carries (matched in any case),
    # and the label of GitHub's own hosted Linux runner of this CPU.
    runner: str     # ARM64
    hosted: str     # ubuntu-24.04-arm

    @property
    def machine(self) -> str:
        """What `uname -m` says on a machine of this CPU (aarch64): the wheel platform's CPU is spelled so."""
        return self.wheel


CPUS = (
    Cpu(oci="linux/amd64", debian="amd64", wheel="x86_64", qemu="x86_64", runner="X64", hosted="ubuntu-24.04"),
    Cpu(oci="linux/arm64", debian="arm64", wheel="aarch64", qemu="aarch64", runner="ARM64",
        hosted="ubuntu-24.04-arm"),
)
OCI_NAMES = tuple(c.oci for c in CPUS)
WHEEL_PLATFORM_RE = r"^(x86_64|aarch64)-manylinux_2_[0-9]+$"


def by_oci(name: str) -> Cpu:
    return next(c for c in CPUS if c.oci == name)


def of_wheel_platform(wheel_platform: str) -> Cpu:
    """`aarch64-manylinux_2_36` -> the arm64 CPU (the schema admits only the CPUs of CPUS)."""
    return next(c for c in CPUS if wheel_platform.startswith(c.wheel + "-"))


def host(machine: str | None = None) -> Cpu | None:
    """This host's CPU (from `uname -m`), or None for one this project does not build for."""
    name = machine if machine is not None else _platform.machine()
    aliases = {"amd64": "x86_64", "arm64": "aarch64"}
    name = aliases.get(name, name)
    return next((c for c in CPUS if c.wheel == name), None)


def emulated(oci: str, machine: str | None = None) -> bool:
    """Whether an image of platform `oci` runs here only under QEMU user emulation."""
    here = host(machine)
    return here is None or here.oci != oci
