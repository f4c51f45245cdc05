"""Which matrix.yaml a record was judged with (the whole file's digest, kept as provenance), and the digest of one
cell's definition (matrix/definition.py), which is what a record counts for (gate.py).

Both are taken as canonical JSON (the matrix validated, its defaults left out: `exclude_defaults`): comments, key
order, quoting and a value spelled out at its default do not change them; any change of meaning does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

# Where and how a matrix is built and shipped, not what its cells are: editing these (a cache ref, a
# runner label, a registry) must not turn every saved result into "another matrix".
NOT_THE_MATRIX = {"cache", "runners", "registry"}
# Declared, and carried by what uses them: a CUDA flavour's version is spelled by its name (checked on load),
# which the lanes and toolkit recipes that use it hold; declaring a flavour that nothing uses yet changes no cell.
CARRIED = {"cuda"}


def matrix_digest(spec: BaseModel) -> str:
    """`sha256:…` of a validated matrix (the `spec` of a loaded matrix.yaml): its cells, exclusions,
    expectations, profiles and tags; not the CI and delivery settings (NOT_THE_MATRIX)."""
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude=NOT_THE_MATRIX | CARRIED)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def definition_digest(definition: Mapping[str, Any]) -> str:
    """`sha256:…` of a cell's definition (matrix/definition.py) as canonical JSON: what a record counts for."""
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def short(digest: str | None) -> str:
    return (digest or "none").removeprefix("sha256:")[:12]
