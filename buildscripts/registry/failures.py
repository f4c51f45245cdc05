"""How long a registry gets to answer, and a failed registry request in words: what failed, the likely fix, and
no credential (the registry's and the engine's words are scrubbed first)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .. import proc
from ..errors import ConfigError, RegistryError
from .references import host, repository_of

PUSH, PULL, READ, COPY = "push of", "pull of", "reading", "copy to"  # what failed, in messages
DEADLINE_ENV, DEADLINE_S = "SGLANG_IMAGES_REGISTRY_TIMEOUT", 20.0
GRACE_S = 10.0               # past the tool's own deadline, before the process is stopped from here
# What skopeo and cosign say when their deadline passed, or a connection stalled.
STALLED_RE = re.compile(r"context deadline exceeded|i/o timeout|TLS handshake timeout|Client\.Timeout", re.I)


def deadline(env: Mapping[str, str]) -> float:
    """Seconds a registry gets to answer one request: DEADLINE_S, or SGLANG_IMAGES_REGISTRY_TIMEOUT."""
    raw = env.get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEADLINE_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 24 * 3600:
        msg = f"{DEADLINE_ENV}={raw!r} is not a number of seconds (more than 0, at most a day)"
        raise ConfigError(msg, hint=f"e.g. {DEADLINE_ENV}=60 for a slow link; unset, a registry gets "
                                    f"{DEADLINE_S:.0f} s")
    return seconds


def stalled(done: proc.Completed) -> bool:
    """The command ran out of its deadline (its own, or ours), rather than being told no."""
    return done.timed_out or bool(STALLED_RE.search(done.output))


def no_answer(action: str, ref: str, seconds: float) -> RegistryError:
    where = host(repository_of(ref))
    msg = f"the registry {where} did not answer within {seconds:.0f} s ({action} {ref})"
    return RegistryError(msg, hint=f"check that {where} is up and reachable from here; on a slow link give it "
                                   f"longer with {DEADLINE_ENV}=SECONDS")


def scrub(text: str) -> str:
    """Remove anything shaped like credentials from a registry's or engine's message before it is shown."""
    text = re.sub(r"//[^/@\s:]+:[^/@\s]+@", "//***@", text)
    return re.sub(r"(?i)(authorization|auth|password|token)([\"'=: ]+)\S+", r"\1\2***", text)


def failure(action: str, ref: str, detail: str) -> RegistryError:
    """A RegistryError for a registry request that failed, with the likely fix."""
    detail = scrub(detail)
    hint = "check that the registry runs and answers, and that `docker login HOST` was done if it needs auth"
    lower = detail.lower()
    if "connection refused" in lower or "no such host" in lower or "dial tcp" in lower:
        hint = "the registry is unreachable: start it, or pass the right --registry HOST:PORT"
    elif "405" in detail or "not allowed" in lower or "read-only" in lower:
        hint = "the registry refuses writes (read-only, or no push right here); no tag was moved"
    elif "unauthorized" in lower or "denied" in lower or "authentication required" in lower:
        hint = "the registry refused: run `docker login HOST` (credentials live in docker's config.json)"
    elif any(word in lower for word in ("not a json", "not a manifest", "invalid character", "unmarshal",
                                        "unsupported manifest", "malformed")):
        hint = ("the registry answered, with something that is no manifest: what it holds there is malformed "
                "(written by hand, or damaged); nothing was concluded from it")
    return RegistryError(f"{action} {ref} failed: {detail}", hint=hint)
