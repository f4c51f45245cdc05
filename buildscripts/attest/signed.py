"""The SBOM and the provenance as signed Statements: written beside the run's results, attached to the digest.

Each is an in-toto Statement whose subject is the image's platform manifest (REPO and `sha256:…`), in a DSSE
envelope signed with the verifier's key (the verdicts' key and envelope: trust/dsse.py), written to
runs/RUN/described/CELL/{sbom,provenance}.json (the report links them) and attached with cosign as the verdicts
are (`sha256-<hex>.att`). Each file is read back and checked as `check` reads it before it is attached (signed by a
trusted key, for this very digest): an edited or misplaced one stops before anything is attached, and one already
attached is not attached again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import log
from ..errors import NotVerified
from ..trust import cosign, described, dsse, verdicts
from ..trust.keys import PublicKey, SigningKey
from ..trust.statement import STATEMENT_TYPE
from ..workspace import checked_name

FOLDER = "described"
FILES = {described.SBOM: "sbom.json", described.PROVENANCE: "provenance.json"}


def statement(kind: str, predicate: Mapping[str, Any], repository: str, digest: str) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": kind, "predicate": dict(predicate)}


def folder(run_dir: Path, cell_id: str) -> Path:
    return run_dir / FOLDER / checked_name(cell_id, "cell id")


def write(run_dir: Path, cell_id: str, document: Mapping[str, Any], key: SigningKey) -> Path:
    """Sign `document` (a Statement) with `key` into its file under the run; the file, written whole."""
    payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    path = folder(run_dir, cell_id) / FILES[str(document["predicateType"])]
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps(dsse.sign(payload, dsse.IN_TOTO, key)) + "\n")
    scratch.replace(path)   # a reader sees the old envelope or the new one, never half of one
    return path


def files(run_dir: Path, cell_id: str) -> list[Path]:
    where = folder(run_dir, cell_id)
    return [where / name for name in FILES.values() if (where / name).is_file()]


def attach(paths: Sequence[Path], ref: str, *, trusted: Sequence[PublicKey], env: Mapping[str, str] | None = None,
           log_file: Path | None = None) -> list[Path]:
    """Attach each of `paths` to `ref` (REPO@sha256:… of the platform manifest they describe); those attached."""
    _, digest = verdicts.split_digest_ref(ref)
    checked = []
    for path in paths:   # every file checked before the first is attached
        envelope = verdicts.read_envelope(path)
        kind = next((k for k, name in FILES.items() if path.name == name), None)
        if kind is None or not described.is_described(envelope):
            msg = f"{path} is no SBOM or provenance of this project"
            raise NotVerified(msg, hint="attach only what `nox -s build` wrote under runs/RUN/described/")
        described.open_described(envelope, kind, digest, trusted, where=str(path))
        checked.append((path, envelope))
    present = cosign.download(ref, env or {}, log_file=log_file)
    attached = []
    for path, envelope in checked:
        if any(verdicts.same_envelope(envelope, p) for p in present):
            log.info(f"{path.name}: already attached to {ref}")
            continue
        cosign.attach(path, ref, env, log_file=log_file)
        attached.append(path)
    return attached
