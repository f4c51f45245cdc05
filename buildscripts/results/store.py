"""Results files: written atomically, read with a clear error when corrupt or of another schema."""

from __future__ import annotations

import json
import math
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import disk
from ..errors import FatalError, ResultsError
from .record import READABLE_VERSIONS, RunResults

MAX_JSON_BYTES = 64 * 2**20   # a results file of a 100-cell run is a few MB
MAX_JSON_DEPTH = 64           # results nest about 6 levels; probe evidence a few more


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def save(results: RunResults, path: Path) -> None:
    """Whole or not at all (`disk.write_text`): an interrupted run never leaves half a results file."""
    disk.write_text(path, results.model_dump_json(indent=2) + "\n")


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
        data = json.loads(raw.decode("utf-8"), parse_constant=_not_a_number, parse_float=_finite)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        msg = f"{path}:{line}: byte 0x{raw[exc.start]:02x} is not UTF-8"
        raise error(msg, hint=hint) from None
    except RecursionError:
        msg = f"{path} is nested deeper than {MAX_JSON_DEPTH} levels"
        raise error(msg, hint=hint) from None
    except NotFinite as exc:
        msg = f"{path}: {exc} is not a finite number (JSON has no NaN or infinity; it would be written back as null)"
        raise error(msg, hint=hint) from None
    except ValueError as exc:  # bad JSON (with its line and column)
        msg = f"{path} is not valid JSON: {exc}"
        raise error(msg, hint=hint) from None
    problem = _shape_problem(data)
    if problem:
        msg = f"{path}: {problem}"
        raise error(msg, hint=hint)
    return data


class NotFinite(ValueError):
    """A number JSON cannot hold: NaN, Infinity, or a literal too large for a float (1e999)."""


def _not_a_number(word: str) -> float:
    raise NotFinite(word)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NotFinite(text if len(text) <= 40 else text[:40] + "…")
    return number


def _shape_problem(data: Any) -> str | None:
    """Too deep, or text no file can hold (a lone surrogate from a `\\ud800` escape cannot be written back
    as UTF-8): checked without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return f"the text {item[:40]!r} holds a lone surrogate (not a character)"
        elif isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            children = [*item, *item.values()] if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(data: Any) -> Any:
    """`data` with every lone surrogate replaced by U+FFFD: for what an image under test prints (a file name
    of undecodable bytes reaches JSON as `\\udcff`), which a results file could not be saved with. A results
    file that holds one is refused instead (`read_json`): something else wrote it."""
    if isinstance(data, str):
        return _SURROGATE.sub("\ufffd", data)
    if isinstance(data, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in data.items()}
    if isinstance(data, list):
        return [without_surrogates(item) for item in data]
    return data


def load(path: Path) -> RunResults:
    data = read_json(path, ResultsError, "re-run `nox -s build` or delete the file")
    version = data.get("schema_version") if isinstance(data, dict) else None
    # `true == 1.0 == 1` in Python: only an integer is a schema number, however the others compare
    if type(version) is not int or version not in READABLE_VERSIONS:
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
