"""An image's layers by the Dockerfile stage that made them, from the engine's history of the image.

The build records them with the image (`ImageInfo.layers`), so the report can say what an image's
largest parts are without an engine; `report/sizes.py` uses the same names for its benchmark tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# History entries name the command that made a layer; these name the Dockerfile stage behind it.
_STAGES = (
    (re.compile(r"bootstrap\.txt|python3 -m venv"), "pyenv (venv, uv)"),
    (re.compile(r"/opt/locks/lane\.txt"), "torch lane"),
    (re.compile(r"/opt/locks/sglang\.txt"), "SGLang"),
    (re.compile(r"apt-get install"), "toolkit: Debian packages"),
    (re.compile(r"/opt/locks/toolkit\.txt"), "toolkit: pip"),
    (re.compile(r"assemble-cuda-home"), "CUDA home"),
    (re.compile(r"bake\.py"), "baked kernel caches"),
)


def stage_of(created_by: str) -> str:
    for pattern, name in _STAGES:
        if pattern.search(created_by):
            return name
    return "base image" if not created_by.strip() else "other"


def layer_sizes(history: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Bytes per stage, largest first (metadata-only steps have size 0 and are left out)."""
    totals: dict[str, int] = {}
    for entry in history:
        size = int(entry.get("Size") or 0)
        if size:
            name = stage_of(str(entry.get("CreatedBy") or ""))
            totals[name] = totals.get(name, 0) + size
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))
