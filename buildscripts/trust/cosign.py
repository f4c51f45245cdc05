"""cosign 2.5 for what lives in a registry: attach a signed verdict to a digest, download the attached ones.

Signing and verifying are done in Python (dsse.py); cosign is the registry client that stores them where
cosign and other tools look (`sha256-<hex>.att`, registries having no referrers API). Authentication is
docker's config.json, as for the engine; plain HTTP only for loopback registries (cosign's own rule). Each call
has the registry deadline of registry/failures.py (cosign's own `--timeout`, and ours a little later).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import RegistryError
from ..registry import failures
from . import dsse

HINT = "Debian trixie's cosign 2.5 (`.ci/install-engine` installs it; `python -m buildscripts setup --for tests`)"
NONE_FOUND = "found no attestations"
DOWNLOAD, ATTACH = "download attestation", "attach attestation"   # what failed, in messages
# What cosign says when the registry answered with something that is no attestation it can read.
MALFORMED = ("unmarshal", "invalid character", "unexpected end of json", "unexpected media type",
             "mediatype", "invalid layer", "decoding", "no child with platform", "blob unknown")


def binary() -> str:
    return proc.which("cosign", hint=HINT)


def _failed(action: str, ref: str, done: proc.Completed, seconds: float) -> RegistryError:
    """What cosign said (its warnings left out): the registry that did not answer, an attachment that is no
    attestation, or the registry's likely fix, credentials hidden."""
    if failures.stalled(done):
        return failures.no_answer(f"cosign {action}", ref, seconds)
    detail = " ".join(line for line in done.tail(4).splitlines() if not line.startswith("WARNING"))
    if any(word in detail.lower() for word in MALFORMED):
        msg = f"the attestations attached to {ref} are malformed: {failures.scrub(detail)}"
        return RegistryError(msg, hint="the registry answered, with an attachment that is no signed attestation: "
                                       "someone wrote it there by hand; remove the `.att` tag or attach again")
    return failures.failure(f"cosign {action}", ref, detail or f"exit {done.returncode}")


def _run(command: list[str], ref: str, env: Mapping[str, str], log_file: Path | None) -> tuple[proc.Completed, float]:
    """cosign COMMAND… REF within the deadline: cosign's own `--timeout` does not bound a registry that takes the
    connection and never answers (2.5 waits on), so the process is stopped at the deadline here too."""
    seconds = failures.deadline(env)
    done = proc.run([binary(), *command, "--timeout", f"{seconds:g}s", ref], log=log_file, timeout=seconds)
    return done, seconds


def download(ref: str, env: Mapping[str, str] | None = None, *, log_file: Path | None = None) -> list[Any]:
    """The attestation envelopes attached to `ref` (REPO@sha256:…), as stored; [] when none is."""
    with tempfile.TemporaryDirectory(prefix="sglang-images-att-") as scratch:
        out = Path(scratch) / "attestations.jsonl"
        done, seconds = _run(["download", "attestation", "--output-file", str(out)], ref, env or {}, log_file)
        if not done.ok:
            if NONE_FOUND in done.output and not failures.stalled(done):
                return []
            raise _failed(DOWNLOAD, ref, done, seconds)
        lines = out.read_text(encoding="utf-8", errors="replace").splitlines() if out.exists() else []
    # each read strictly; one that cannot be is kept (dsse.Unreadable), so that a reader counts it and says why
    return [dsse.read_envelope(line) for line in lines]


def attach(envelope: Path, ref: str, env: Mapping[str, str] | None = None, *, log_file: Path | None = None) -> None:
    done, seconds = _run(["attach", "attestation", "--attestation", str(envelope)], ref, env or {}, log_file)
    if not done.ok:
        raise _failed(ATTACH, ref, done, seconds)
