"""What this machine has seen of each digest's verdicts: a small folder of state, one file per digest.

Where: `--state-dir DIR`, else $SGLANG_IMAGES_STATE_DIR, else $XDG_STATE_HOME/sglang-images (an absolute one, as
the XDG spec asks), else ~/.local/state/sglang-images; the files are `seen/sha256-<hex>.json`. Each keeps the
newest snapshot seen for the digest (its number, time and the verdicts it lists) and every verdict seen attached to
it (by id, with the key that signed it), and where and when they were seen. rollback.py decides with it; only
`keep` writes it: whole or not at all (a temporary file renamed over the old one), under a lock of the folder, so
that two checks at once never keep the older of what they saw.

A file that cannot be read as this module writes it (edited, truncated, another digest's) stops the check with
its path and the way out, never passes silently: a state that is lost is first contact again.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from .. import disk, strictjson
from ..errors import CannotCheck
from .verdict_form import HEX64, STAMP

STATE_ENV = "SGLANG_IMAGES_STATE_DIR"
FORMAT: Literal["sglang-images/seen-verdicts/v1"] = "sglang-images/seen-verdicts/v1"
FOLDER = "seen"
# Whole-value patterns (pydantic's search anywhere in the value unless anchored).
ID = f"^sha256:{HEX64}$"
KEYID = f"^{HEX64}$"
WHEN = f"^(?:{STAMP})$"
VerdictId = Annotated[str, StringConstraints(pattern=ID)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class KeptVerdict(_Strict):
    arch: str | None
    result: str
    signed_at: str | None = Field(pattern=WHEN)
    signer: str = Field(pattern=KEYID)


class KeptSnapshot(_Strict):
    id: str = Field(pattern=ID)
    version: int = Field(ge=1)
    signed_at: str = Field(pattern=WHEN)
    signer: str = Field(pattern=KEYID)
    verdicts: list[VerdictId]


class Kept(_Strict):
    """What was seen of one digest, the newest of it."""

    format: Literal["sglang-images/seen-verdicts/v1"] = FORMAT
    digest: str = Field(pattern=ID)
    seen_at: str = Field(pattern=WHEN)      # when it was last seen (or kept unchanged)
    where: str                               # what was checked then, for messages
    snapshot: KeptSnapshot | None
    verdicts: dict[VerdictId, KeptVerdict]


def is_digest(digest: str) -> bool:
    return re.fullmatch(ID, digest) is not None


def state_dir(env: Mapping[str, str], given: Path | None = None) -> Path:
    if given is not None:
        return given
    if env.get(STATE_ENV):
        return Path(env[STATE_ENV])
    xdg = env.get("XDG_STATE_HOME") or ""
    base = Path(xdg) if Path(xdg).is_absolute() else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return base / "sglang-images"


@dataclass(frozen=True)
class History:
    """The state folder of one reader (`check`, `here`)."""

    folder: Path

    @classmethod
    def at(cls, env: Mapping[str, str], given: Path | None = None) -> History:
        return cls(state_dir(env, given))

    def path(self, digest: str) -> Path:
        if not is_digest(digest):   # a digest is the file's name: nothing else may become a path
            msg = f"{digest!r} is no sha256 digest"
            raise CannotCheck(msg, hint="verdicts belong to sha256 digests")
        return self.folder / FOLDER / f"{digest.replace(':', '-')}.json"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock: a reader decides from what it read and writes it before another reads."""
        folder = self.folder / FOLDER
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _unwritable(folder, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read(self, digest: str) -> Kept | None:
        """What was kept of `digest`; None when nothing was (first contact). CannotCheck when the file is there
        but is not what `keep` writes."""
        path = self.path(digest)
        try:
            if path.exists() and not path.is_file():
                why = "it is not a file"
            else:
                kept = Kept.model_validate(strictjson.loads_object(path.read_bytes(), fields=frozenset()))
                if kept.digest == digest:
                    return kept
                why = f"it is the record of {kept.digest}"
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:   # strictjson.Ambiguous and pydantic's ValidationError are ValueErrors
            why = _first_line(exc)
        msg = f"what this machine has seen of {digest} ({path}) cannot be read: {why}"
        raise CannotCheck(msg, hint="only `check` writes it: if you did not change it, something else did. Remove it "
                                    "to trust what the registry serves now, as at first contact (trust on first use)")

    def keep(self, kept: Kept) -> Path:
        path = self.path(kept.digest)
        try:
            return disk.write_text(path, kept.model_dump_json(indent=1) + "\n")
        except OSError as exc:
            raise _unwritable(path.parent, exc) from None


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "the record"
        return f"{where}: {error['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _unwritable(folder: Path, exc: OSError) -> CannotCheck:
    msg = f"cannot keep what this machine has seen of the verdicts in {folder}: {exc.strerror or exc}"
    return CannotCheck(msg, hint=f"give a folder of yours with --state-dir DIR or ${STATE_ENV}: without it, a "
                                 "registry could roll verdicts back unnoticed")
