"""The words matrix.yaml is written in, each a checked type: versions and names, GPU targets (sm_XX[a|f]), CUDA
flavours (cu130), the platforms this project builds for, and CI runner labels. The models of the file (schema.py)
are made of these.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated

from pydantic import AfterValidator, Field

from .platforms import OCI_NAMES

# GPU targets: ASCII only (`re`'s \d and `$` would let `sm_٩٠a` and "sm_90a\n" through), and a closed set of
# compute capabilities that nvcc knows: Volta (70, 72), Turing (75), Ampere (80, 86, 87), Ada (89), Hopper (90),
# Blackwell (100, 101, 103, 110, 120, 121). `a` (arch-specific features) exists from sm_90, `f` (family) from sm_100.
ARCH_RE = re.compile(r"sm_([0-9]{2,3})([af]?)")
KNOWN_ARCHS = (70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)
VERSION_RE = r"^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$"
NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"

# A CUDA flavour's name as torch's wheels spell it: `cu`, then the CUDA version's major and its one-digit minor
# (cu128 is CUDA 12.8, cu130 is 13.0, cu132 is 13.2). Which flavours a matrix builds for is data (`cuda:`).
FLAVOUR_RE = re.compile(r"cu([1-9][0-9])([0-9])")
CUDA_VERSION_RE = re.compile(r"[1-9][0-9]\.[0-9]")  # what a flavour's name spells: 13.0 for cu130
FLAVOUR_HINT = "write cu and the CUDA version's digits, e.g. cu130 for CUDA 13.0"

# Bounded, so that a cell id (made of four names and three versions) stays a valid folder name (workspace).
Version = Annotated[str, Field(pattern=VERSION_RE, max_length=32)]
Name = Annotated[str, Field(pattern=NAME_RE, max_length=32)]


def flavour_version(flavour: str) -> str | None:
    """`cu130` -> `13.0`: the CUDA major.minor a flavour's name stands for; None for a name that is not one."""
    match = FLAVOUR_RE.fullmatch(flavour)
    return f"{match[1]}.{match[2]}" if match else None


def _flavour_name(value: str) -> str:
    if flavour_version(value) is None:
        msg = f"{value!r} is not a CUDA flavour name: {FLAVOUR_HINT}"
        raise ValueError(msg)
    return value


FlavourName = Annotated[str, AfterValidator(_flavour_name)]


def _arch_list(value: tuple[str, ...]) -> tuple[str, ...]:
    for arch in value:
        problem = arch_problem(arch)
        if problem:
            raise ValueError(problem)
    return value


ArchList = Annotated[tuple[str, ...], AfterValidator(_arch_list)]


def _platform_name(value: str) -> str:
    if value not in OCI_NAMES:
        close = difflib.get_close_matches(value, OCI_NAMES, n=1)
        fix = f"did you mean {close[0]!r}? " if close else ""
        msg = f"{value!r} is not a platform this project builds for; {fix}known: {', '.join(OCI_NAMES)}"
        raise ValueError(msg)
    return value


PlatformName = Annotated[str, AfterValidator(_platform_name)]
RUNNER_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a CI runner label: no spaces, no commas


def _runner_label(value: str) -> str:
    if not RUNNER_LABEL_RE.fullmatch(value):  # not `match` with `$`: that lets a trailing newline through
        msg = "a runner label is letters, digits, '.', '_' or '-' (no spaces), e.g. gpu or rtx-pro-6000"
        raise ValueError(msg)
    return value


def _some_labels(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        msg = "give at least one runner label, e.g. [self-hosted, linux, x64, gpu]"
        raise ValueError(msg)
    return value


Labels = Annotated[tuple[Annotated[str, AfterValidator(_runner_label)], ...], AfterValidator(_some_labels)]


def arch_problem(arch: str) -> str | None:
    """Why `arch` is not a GPU target this project builds for, or None."""
    match = ARCH_RE.fullmatch(arch)
    if not match:
        return f"{arch!r} is not a GPU target; write sm_XX, sm_XXa or sm_XXf (e.g. sm_100a)"
    number, suffix = int(match[1]), match[2]
    if number not in KNOWN_ARCHS:
        return f"{arch!r} is not a known GPU target; known: " + ", ".join(f"sm_{n}" for n in KNOWN_ARCHS)
    if (suffix == "a" and number < 90) or (suffix == "f" and number < 100):
        return f"{arch!r} does not exist: `a` targets start at sm_90a, `f` targets at sm_100f"
    return None
