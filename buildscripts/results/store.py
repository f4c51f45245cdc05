"""Results files: written atomically, read with a clear error when corrupt or of another schema."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import FatalError, ResultsError
from .schema import READABLE_VERSIONS, RunResults

MAX_JSON_BYTES = 64 * 2**20   # a results file of a 100-cell run is a few MB
MAX_JSON_DEPTH = 64           # results nest about 6 levels; probe evidence a few more


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


def read_json(path: Path, error: type[FatalError], hint: str) -> Any:
    """The JSON data of the regular file `path`, or `error` saying why not (with `hint`).

    Bounded: at most MAX_JSON_BYTES and MAX_JSON_DEPTH levels (json.loads recurses, and everything that
    renders the data afterwards recurses again), so a hostile file is an error, not a crash or a hang.
    """
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            msg = f"{path} is not a regular file"
            raise error(msg, hint=hint)
        with path.open("rb") as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror}"
        raise error(msg, hint=hint) from None
    except ValueError:  # a NUL or a lone surrogate in the name
        msg = f"{path!r} cannot be a file name"
        raise error(msg, hint=hint) from None
    if len(raw) > MAX_JSON_BYTES:
        msg = f"{path} is larger than {MAX_JSON_BYTES // 2**20} MiB"
        raise error(msg, hint=hint)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        msg = f"{path}:{line}: byte 0x{raw[exc.start]:02x} is not UTF-8"
        raise error(msg, hint=hint) from None
    except RecursionError:
        msg = f"{path} is nested deeper than {MAX_JSON_DEPTH} levels"
        raise error(msg, hint=hint) from None
    except ValueError as exc:  # bad JSON (with its line and column)
        msg = f"{path} is not valid JSON: {exc}"
        raise error(msg, hint=hint) from None
    if _depth(data) > MAX_JSON_DEPTH:
        msg = f"{path} is nested deeper than {MAX_JSON_DEPTH} levels"
        raise error(msg, hint=hint)
    return data


def _depth(data: Any) -> int:
    """Levels of nesting, counted without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_JSON_DEPTH:
                break
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def load(path: Path) -> RunResults:
    data = read_json(path, ResultsError, "re-run `nox -s build` or delete the file")
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
