"""Which matrix.yaml a results file was made from, and the refusal to mix results of another one.

The digest is taken of the validated matrix with its defaults left out (`exclude_defaults`), as
canonical JSON: comments, key order, quoting and a value spelled out at its default do not change
it; any change of meaning (a cell, an exclusion, an expectation, a profile, a tag template) does.
Files written before the digest was recorded carry none: reports read them as "unknown matrix", with a
warning; what vouches for images (tag, promote, export) refuses them unless told to use another matrix.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

from ..errors import ResultsError
from .schema import RunResults

ALLOW_FLAG = "--allow-other-matrix"


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


def short(digest: str | None) -> str:
    return (digest or "none").removeprefix("sha256:")[:12]


def check_matrix(run: RunResults, path: Path, matrix: Path, digest: str, *, allow_other: bool,
                 allow_unknown: bool = True) -> str | None:
    """None when `run` (read from `path`) was made from the matrix whose digest is `digest`, else a warning.

    Raises ResultsError for results of another matrix unless `allow_other`: merging or tagging them
    against this matrix would mix cells, exclusions and expectations that are not the same. A file that
    records no digest is accepted with a warning where only reports are made of it (`allow_unknown`);
    what vouches for images (tag, promote, export) refuses it unless `allow_other`.
    """
    if run.matrix_digest is None:
        what = f"{path}: records no matrix digest (written before it was recorded, or not by a verifier)"
        if allow_unknown or allow_other:
            return f"{what}: accepted as results of an unknown matrix"
        raise ResultsError(what, hint=f"verify again with this version, or pass {ALLOW_FLAG} to use it with "
                                      f"{matrix} (its cells, axes and targets apply)")
    if run.matrix_digest == digest:
        # the file's own digest is outside every seal: what binds its records is the copy each one sealed
        other = [c.cell_id for c in run.cells if c.seal is not None and c.matrix_digest != digest]
        if not other:
            return None
        what = (f"{path}: records {', '.join(other)} were sealed for another matrix.yaml than the one the file "
                f"names (or before records carried it), though the file says {short(digest)}")
        if allow_unknown or allow_other:
            return f"{what}: accepted as results of an unknown matrix"
        raise ResultsError(what, hint=f"verify again with this version, or pass {ALLOW_FLAG} to use them with "
                                      f"{matrix} (its cells, axes and targets apply)")
    what = (f"{path} was made from another matrix.yaml (digest {short(run.matrix_digest)}"
            f"{f', {run.matrix}' if run.matrix else ''}) than {matrix} (digest {short(digest)})")
    if allow_other:
        return f"{what}; used anyway ({ALLOW_FLAG})"
    raise ResultsError(what, hint=f"pass --matrix with the matrix.yaml those results were made from, "
                                  f"or {ALLOW_FLAG} to use them with this one")
