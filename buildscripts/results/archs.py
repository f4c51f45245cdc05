"""The one arch rule: `sm_90`, `sm_90a`, `sm_90f` and `sm90` name the same GPU generation.

Targets carry a suffix (`a`: arch-specific features, `f`: family) that a GPU does not report, so
every comparison between a target and the arch a stage ran on goes through `family()`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ARCH = re.compile(r"^sm_?(\d+)[af]?$")


def family(arch: str) -> str:
    """`sm_90a` / `sm_90f` / `sm90` -> `sm_90`; anything else is returned lower-cased as it is."""
    match = _ARCH.match(arch.strip().lower())
    return f"sm_{match.group(1)}" if match else arch.strip().lower()


def tag_form(arch: str) -> str:
    """`sm_90a` -> `sm90`: how an arch is spelled in tags (`-verified-sm90`)."""
    return family(arch).replace("_", "")


def families(archs: Iterable[str]) -> set[str]:
    return {family(a) for a in archs}
