"""Results files: written atomically, read with a clear error when corrupt or of another schema."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from ..errors import ResultsError
from .schema import READABLE_VERSIONS, RunResults


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def save(results: RunResults, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(results.model_dump_json(indent=2) + "\n")
        fh.flush()
        os.fsync(fh.fileno())  # on disk before the rename: a machine that dies then keeps old or new, never empty
    tmp.replace(path)  # atomic: an interrupted run never leaves half a results file


def load(path: Path) -> RunResults:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, or bytes that are no UTF-8
        msg = f"cannot read results file {path}: {exc}"
        raise ResultsError(msg, hint="re-run `nox -s build` or delete the file") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        msg = f"{path}: results schema {version!r} is not supported (this version reads {readable})"
        raise ResultsError(msg, hint="re-run the verification with this version to regenerate it")
    try:
        return RunResults.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = f"{path}: corrupted results ({where}: {first['msg']})"
        raise ResultsError(msg, hint="re-run the verification to regenerate it") from None
