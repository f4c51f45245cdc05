"""cosign 2.5 for what lives in a registry: attach a signed verdict to a digest, download the attached ones.

Signing and verifying are done in Python (dsse.py); cosign is the registry client that stores them where
cosign and other tools look (`sha256-<hex>.att`, registries having no referrers API). Authentication is
docker's config.json, as for the engine; plain HTTP only for loopback registries (cosign's own rule).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from .. import distribution, proc
from ..errors import RegistryError

HINT = "Debian trixie's cosign 2.5 (`.ci/install-engine` installs it; `python -m buildscripts setup --for tests`)"
NONE_FOUND = "found no attestations"
TIMEOUT_S = 180
DOWNLOAD, ATTACH = "download attestation", "attach attestation"   # what failed, in messages


def binary() -> str:
    return proc.which("cosign", hint=HINT)


def _failed(action: str, ref: str, done: proc.Completed) -> RegistryError:
    """What cosign said (its warnings left out), with the registry's likely fix and credentials hidden."""
    detail = " ".join(line for line in done.tail(4).splitlines() if not line.startswith("WARNING"))
    return distribution.failure(f"cosign {action}", ref, detail or f"exit {done.returncode}")


def download(ref: str, *, log_file: Path | None = None) -> list[Any]:
    """The attestation envelopes attached to `ref` (REPO@sha256:…), as stored; [] when none is."""
    cosign = binary()
    with tempfile.TemporaryDirectory(prefix="sglang-images-att-") as scratch:
        out = Path(scratch) / "attestations.jsonl"
        done = proc.run([cosign, "download", "attestation", "--output-file", str(out), ref], log=log_file,
                        timeout=TIMEOUT_S)
        if not done.ok:
            if NONE_FOUND in done.output:
                return []
            raise _failed(DOWNLOAD, ref, done)
        lines = out.read_text(encoding="utf-8", errors="replace").splitlines() if out.exists() else []
    found = []
    for line in lines:
        try:
            found.append(json.loads(line))
        except ValueError:
            found.append(line)  # kept, so that a reader counts it and says it is no envelope
    return found


def attach(envelope: Path, ref: str, *, log_file: Path | None = None) -> None:
    done = proc.run([binary(), "attach", "attestation", "--attestation", str(envelope), ref], log=log_file,
                    timeout=TIMEOUT_S)
    if not done.ok:
        raise _failed(ATTACH, ref, done)
