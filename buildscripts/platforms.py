"""Platforms as Docker and containerd read them (containerd's `platforms.Normalize`): `Linux/x86_64` is
linux/amd64, `linux/aarch64` is linux/arm64/v8. Whoever picks an index entry (`check`, `verify` by digest,
promotion, the loaders themselves) must pick the one the engine would pull: an entry spelled otherwise is
still that platform's, and two entries of one platform make an index ambiguous.
"""

from __future__ import annotations

import platform as host_platform
import re

PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?")
# Spellings of architectures that Docker and containerd take for another.
ARCHITECTURES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64", "i386": "386", "i686": "386",
                 "armhf": "arm", "armel": "arm"}
ARM_VARIANTS = {"armhf": "v7", "armel": "v6"}
DEFAULT_VARIANTS = {("amd64", "v1"): "", ("arm64", ""): "v8", ("arm64", "8"): "v8", ("arm64", "v8.0"): "v8",
                    ("arm", ""): "v7", ("arm", "5"): "v5", ("arm", "6"): "v6", ("arm", "7"): "v7", ("arm", "8"): "v8"}


def machine() -> str:
    """This machine's platform as an index names it (`linux/amd64`): what Docker would pull here."""
    name = host_platform.machine().lower()
    return f"linux/{ARCHITECTURES.get(name, name)}"


def problem(value: str) -> str | None:
    return None if PLATFORM.fullmatch(value) else f"{value!r} is not OS/ARCHITECTURE[/VARIANT], e.g. linux/arm64"


def normalised(platform: str) -> str:
    """`platform` (os/architecture[/variant], any case) as Docker and containerd read it."""
    os, architecture, variant = [*platform.lower().split("/", 2), "", ""][:3]
    variant = ARM_VARIANTS.get(architecture, variant)
    architecture = ARCHITECTURES.get(architecture, architecture)
    variant = DEFAULT_VARIANTS.get((architecture, variant), variant)
    return "/".join(part for part in (os, architecture, variant) if part)


def matches(found: str, asked: str) -> bool:
    """`found` is a platform Docker takes for `asked` (an arm64 entry without variant is v8); a variant is
    compared only when `asked` names one."""
    f, a = normalised(found).split("/"), normalised(asked).split("/")
    if f[:2] != a[:2]:
        return False
    return len(asked.split("/")) < 3 or f[2:] == a[2:]


def of_entry(entry: dict[str, object]) -> str | None:
    """The platform an index entry names (`os/architecture[/variant]`), None when it names none."""
    named = entry.get("platform")
    if not isinstance(named, dict) or not named.get("os") or not named.get("architecture"):
        return None
    parts = [str(named["os"]), str(named["architecture"])] + ([str(named["variant"])] if named.get("variant") else [])
    return "/".join(parts)
