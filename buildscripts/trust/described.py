"""What the image holds and how it was built: the SBOM and the provenance attached beside the verdicts.

Both are in-toto Statements in DSSE envelopes signed by a verifier's key (dsse.py), attached to the platform
manifest they describe as cosign attaches (`sha256-<hex>.att`). They are set aside from the verdicts where they are
read (`is_described`): they vouch for no arch, and a verdict's reader must not count them, nor list them as ignored.

`open_described` is the one reader: a trusted key signed the payload (one edited after signing, or signed by
another key, is refused), the payload is read by the one strict reader, its predicate type is the one asked, and
its subject is this very digest (an SBOM of another image copied onto this one is refused). `find` weighs every
attached one of a kind: the first that passes is used, each other is listed with why it does not count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NotVerified
from . import dsse
from .keys import PublicKey
from .statement import STATEMENT_TYPE

SBOM = "https://cyclonedx.org/bom"
PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:sglang-images:build-type:cell:v1"   # our own: what a cell's build takes (provenance.py)
NAMES = {SBOM: "SBOM", PROVENANCE: "provenance"}
# The Statement's own fields: a key spelled as one of these in another case is refused (Go would fold it).
FIELDS = frozenset({"_type", "subject", "predicateType", "predicate"})


@dataclass(frozen=True)
class Described:
    """One attestation of a kind that a trusted key signed for the digest."""

    kind: str                    # SBOM or PROVENANCE
    predicate: Mapping[str, Any]
    signer: PublicKey


@dataclass(frozen=True)
class Found:
    """What the attachments of a digest say of one kind: the one used (None: none passed), and why each other
    attestation of that kind does not count."""

    kind: str
    used: Described | None
    refused: tuple[str, ...]

    @property
    def name(self) -> str:
        return NAMES[self.kind]


def claimed_type(envelope: Any) -> str | None:
    """The predicate type an envelope's payload says it holds (not yet who signed it): where it is read."""
    kind = dsse.claimed_predicate(envelope, fields=FIELDS)
    return kind if kind in NAMES else None


def is_described(envelope: Any) -> bool:
    return claimed_type(envelope) is not None


def open_described(envelope: Any, kind: str, digest: str, trusted: Sequence[PublicKey], *,
                   where: str) -> Described:
    """The attestation of `kind` in `envelope`, for `digest`; NotVerified naming `where` and why it is refused."""
    name = NAMES[kind]
    try:
        payload, signer = dsse.verify(envelope, dsse.IN_TOTO, trusted)
    except dsse.EnvelopeError as exc:
        msg = f"{where}: the {name} is refused: {exc.message}"
        raise NotVerified(msg, hint="it was edited after signing, or a key you do not trust signed it") from None
    try:
        document = dsse.payload_json(payload, fields=FIELDS)
    except dsse.EnvelopeError as exc:
        msg = f"{where}: the {name} is refused: {exc.message}"
        raise NotVerified(msg, hint=exc.hint) from None
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE \
            or document.get("predicateType") != kind or not isinstance(document.get("predicate"), dict):
        msg = f"{where}: the {name} is refused: not an in-toto Statement of {kind}"
        raise NotVerified(msg, hint="no builder of this project writes one")
    named = _digests(document.get("subject"))
    if named != [digest]:
        msg = (f"{where}: the {name} is refused: it is signed for {', '.join(named) or 'no digest'}, "
               f"not for {digest}")
        raise NotVerified(msg, hint="an SBOM or provenance belongs to the one image it was made from: it was "
                                    "copied here from another image")
    return Described(kind, document["predicate"], signer)


def _digests(subject: Any) -> list[str]:
    if not isinstance(subject, list):
        return []
    found = []
    for entry in subject:
        sha = entry.get("digest", {}).get("sha256") if isinstance(entry, dict) and \
            isinstance(entry.get("digest"), dict) else None
        found.append(f"sha256:{sha}" if isinstance(sha, str) else "?")
    return found


def find(envelopes: Sequence[Any], kind: str, digest: str, trusted: Sequence[PublicKey]) -> Found:
    """The first attestation of `kind` among `envelopes` that a trusted key signed for `digest`, and why each
    other one of that kind does not count."""
    used: Described | None = None
    refused: list[str] = []
    for number, envelope in enumerate(envelopes, 1):
        if claimed_type(envelope) != kind:
            continue
        try:
            found = open_described(envelope, kind, digest, trusted, where=f"attestation {number}")
        except NotVerified as exc:
            refused.append(exc.message)
            continue
        if used is None:
            used = found
    return Found(kind, used, tuple(refused))
