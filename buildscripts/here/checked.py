"""Was the chosen image verified on this GPU's arch? Asked exactly as `check` asks it, through check's own library
(trust/sources.py: the manifests a reference leads to, the signed verdicts attached to each, judged with the
trusted keys, and the one summary of them for a platform): the platform manifest Docker would pull here, and the
cell's target of this GPU's family (`sm_120a`: a verdict must name that very target, as `check --arch sm_120a`
and its cosign policy require).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ..errors import CannotCheck, ConfigError, NotVerified
from ..trust import sources
from ..trust.keys import PublicKey
from ..trust.seen import History
from .candidates import Candidate


@dataclass(frozen=True)
class Verification:
    verified: bool | None      # None: it could not be checked (registry, cosign, no key): nothing was concluded
    said: str                  # check's one line
    fix: str | None = None     # when not verified: what to do


class Checker(Protocol):
    def __call__(self, candidate: Candidate, target: str, platform: str) -> Verification: ...


@dataclass(frozen=True)
class SignedVerdicts:
    """The real checker: check's library, with the keys `here` trusts."""

    trusted: Sequence[PublicKey]
    env: Mapping[str, str]
    history: History             # what this machine saw per digest before: no going back (trust/rollback.py)
    now: datetime | None = None

    def __call__(self, candidate: Candidate, target: str, platform: str) -> Verification:
        what = candidate.reference
        try:
            judged = sources.check(what, self.trusted, self.env, [target], now=self.now, history=self.history)
            verified, line = sources.summary(what, judged, platform)
        except NotVerified as exc:
            return Verification(False, exc.message, exc.hint)
        except (CannotCheck, ConfigError) as exc:
            return Verification(None, exc.message, exc.hint)
        if verified:
            return Verification(True, line)
        return Verification(False, line, NOT_VERIFIED_FIX)


NOT_VERIFIED_FIX = ("take a tag whose signed verdict names this GPU's arch (the publisher's report by GPU says which), "
                    "or pass --trust-key with the public key of a verifier you trust")


def check_command(candidate: Candidate, target: str, platform: str) -> str:
    """`sglang-images check REF --arch sm_120a --platform linux/amd64`: the same question, with check's table."""
    return f"sglang-images check {candidate.reference} --arch {target} --platform {platform}"
