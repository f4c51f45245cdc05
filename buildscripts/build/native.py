"""The build machine's own base, on which another platform's cells install their wheels (images/Dockerfile.cross).

An arm64 cell built on an x86_64 machine runs uv on an x86_64 base, for aarch64 wheels; the base must have the
cell's Python (the venv it fills is the arm64 image's, interpreter links and all). On an arm64 machine that is the
cell's own base: nothing is emulated then.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ConfigError
from ..matrix import Cell
from ..matrix.platforms import DEFAULT as DEFAULT_PLATFORM
from ..matrix.platforms import host
from ..matrix.schema import MatrixFile
from . import emulation


def needs_native(cell: Cell) -> bool:
    """Whether the cell is built from images/Dockerfile.cross (every platform but linux/amd64)."""
    return cell.platform != DEFAULT_PLATFORM


def native_bases(spec: MatrixFile, cells: Iterable[Cell], machine: str | None = None) -> dict[str, str]:
    """base name of each cross cell -> the base its install stages run on; stops early, with the fix, when a cell
    of another CPU than this machine's has no emulation here or no base of this machine's CPU to install from."""
    here = host(machine)
    found: dict[str, str] = {}
    for cell in cells:
        if not needs_native(cell) or cell.base_name in found:
            continue
        emulation.require(cell.base.cpu)
        name = next((n for n, b in spec.bases.items()
                     if here is not None and b.cpu.oci == here.oci and b.python == cell.base.python), None)
        if name is None:
            mine = here.oci if here else "this machine's CPU"
            msg = (f"{cell.id} installs its wheels on the build machine ({mine}), but matrix.yaml has no base of "
                   f"{mine} with Python {cell.base.python}")
            raise ConfigError(msg, hint=f"add one to `bases:` (its wheel platform starting with "
                                        f"{here.wheel if here else 'this CPU'}-), as the bookworm base is")
        found[cell.base_name] = name
    return found
