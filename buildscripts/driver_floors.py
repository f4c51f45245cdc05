"""Which NVIDIA driver an image's CUDA needs, and whether a driver meets it: the one home of that rule.

The floors are data (data/driver-floors.yaml, with NVIDIA's sources named there): an image's floor is the driver
of its CUDA's own toolkit release (12.8: 570.26), because these images load PTX of their CUDA and compile kernels
at start; a driver between its major's minor-version-compatibility minimum (12.x: 525.60.13) and that floor runs
code compiled ahead of time, not the PTX, and is said so. `here`, the LXC preflight and the GPU ladder's
gpu-visible stage (verify/driver.py) all judge through `judge`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

FLOORS = Path(__file__).resolve().parent / "data" / "driver-floors.yaml"
VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,3}")       # a driver as nvidia-smi writes it: 580.159.04
CUDA = re.compile(r"([1-9][0-9]?)\.([0-9])")          # an image's CUDA major.minor: 13.0
SOURCE = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"


@dataclass(frozen=True)
class Floor:
    """The driver an image of CUDA `cuda` needs."""

    cuda: str                  # 12.8
    minimum: str               # 570.26: the driver of that CUDA's own toolkit release (or its major's minimum)
    compatible: str | None     # 525.60.13: the major's minimum, when lower (code compiled ahead of time runs there)
    own: bool                  # the data names this CUDA itself (False: only its major, and the floor says so)

    @property
    def branch(self) -> int:
        return int(self.minimum.split(".")[0])

    def shown(self) -> str:
        """`570.26 (R570, CUDA 12.8's own driver)`."""
        whose = f"CUDA {self.cuda}'s own driver" if self.own else f"the minimum of CUDA {self.cuda.split('.')[0]}.x"
        return f"{self.minimum} (R{self.branch}, {whose})"


@dataclass(frozen=True)
class DriverVerdict:
    """A driver judged against an image's floor: whether it meets it, in one sentence, and the fix when not."""

    driver: str
    floor: Floor
    meets: bool
    said: str
    fix: str | None = None


def version_key(version: str) -> tuple[int, ...]:
    """`580.159.04` -> (580, 159, 4): drivers compare field by field, as numbers."""
    return tuple(int(part) for part in version.split("."))


@functools.cache
def _data() -> tuple[dict[str, str], dict[str, str]]:
    """({major: minimum}, {major.minor: minimum}) from the data file, every key and value checked."""
    raw: Any = yaml.safe_load(FLOORS.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or set(raw) != {"majors", "toolkits"}:
        msg = f"{FLOORS}: wants exactly the keys majors and toolkits"
        raise ConfigError(msg, hint="restore the file from the project")
    found: list[dict[str, str]] = []
    for section, key_form in (("majors", re.compile(r"[1-9][0-9]?")), ("toolkits", CUDA)):
        table: dict[str, str] = {}
        for key, entry in (raw[section] or {}).items():
            minimum = entry.get("minimum") if isinstance(entry, dict) and set(entry) == {"minimum"} else None
            if not key_form.fullmatch(str(key)) or not isinstance(minimum, str) or not VERSION.fullmatch(minimum):
                msg = f"{FLOORS}: {section}.{key} is not {{minimum: DRIVER}} under a CUDA version"
                raise ConfigError(msg, hint="e.g. \"13.0\": {minimum: \"580.65.06\"}")
            table[str(key)] = minimum
        found.append(table)
    return found[0], found[1]


def floor_for(cuda: str) -> Floor | None:
    """The floor of an image of CUDA `cuda` (major.minor); None when neither it nor its major is known."""
    match = CUDA.fullmatch(cuda.strip())
    if match is None:
        return None
    majors, toolkits = _data()
    major = majors.get(match[1])
    own = toolkits.get(f"{match[1]}.{match[2]}")
    minimum = own or major
    if minimum is None:
        return None
    lower = major if major and own and version_key(major) < version_key(own) else None
    return Floor(f"{match[1]}.{match[2]}", minimum, lower, own is not None)


def judge(driver: str, cuda: str) -> DriverVerdict | None:
    """Whether `driver` (nvidia-smi's driver_version) runs an image of CUDA `cuda`; None when no floor is known
    for that CUDA or the driver's version cannot be read (nothing to compare)."""
    floor = floor_for(cuda)
    driver = driver.strip()
    if floor is None or not VERSION.fullmatch(driver):
        return None
    if version_key(driver) >= version_key(floor.minimum):
        return DriverVerdict(driver, floor, True, f"driver {driver} meets CUDA {floor.cuda}'s floor, {floor.shown()}")
    said = f"driver {driver} is below CUDA {floor.cuda}'s floor, {floor.shown()}"
    if floor.compatible and version_key(driver) >= version_key(floor.compatible):
        said += (f": it runs CUDA {floor.cuda.split('.')[0]}.x code compiled ahead of time (minor version "
                 f"compatibility, from {floor.compatible}), not the CUDA {floor.cuda} PTX these images load and "
                 "compile at start")
    fix = (f"install NVIDIA driver {floor.minimum} or newer (branch R{floor.branch}+) on the host (a container "
           "runs on the host's driver), or use an image of an older CUDA lane")
    return DriverVerdict(driver, floor, False, said, fix)
