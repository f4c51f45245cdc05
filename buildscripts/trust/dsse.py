"""DSSE envelopes (https://github.com/secure-systems-lab/dsse), signed with ECDSA P-256 / SHA-256.

The same envelope `cosign attest --no-upload` prints and `cosign attach attestation` and
`cosign verify-attestation --key` take, so a verdict signed here is checked by cosign as well. The
signature covers the payload *and its type* (the pre-authentication encoding, PAE): a signed results
record can never pass for a signed attestation, or the other way round.

Envelopes and the payloads they sign are read with the one strict reader (strictjson): cosign reads an envelope
with Go's encoding/json, which takes `Payload` for `payload` and the last of two; an envelope or a payload that
two readers could read otherwise is refused, never read one way here and another there.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from .. import strictjson
from ..errors import FatalError, NotVerified
from .keys import PublicKey, SigningKey

IN_TOTO = "application/vnd.in-toto+json"
FIELDS = frozenset({"payloadType", "payload", "signatures", "keyid", "sig"})   # of an envelope, as cosign reads it


class EnvelopeError(FatalError):
    """An envelope that is malformed, or whose signature no trusted key made."""

    exit_code = 8


def pae(payload_type: str, payload: bytes) -> bytes:
    """The bytes a DSSE signature covers: `DSSEv1 LEN(type) type LEN(body) body`."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(payload: bytes, payload_type: str, key: SigningKey) -> dict[str, Any]:
    """An envelope of `payload`, signed by `key` (its keyid names the public key)."""
    signature = key.private.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": key.public.keyid, "sig": base64.b64encode(signature).decode()}]}


@dataclass(frozen=True)
class Unreadable:
    """What stands for an envelope that could not be read (kept, so that a reader counts it and says why)."""

    reason: str


def read_envelope(data: bytes | str) -> Any:
    """An envelope's JSON, read strictly; Unreadable (saying why) when it is no JSON or two readers could read
    it otherwise."""
    try:
        return strictjson.loads(data, fields=FIELDS, free=frozenset())
    except strictjson.Ambiguous as exc:
        return Unreadable(str(exc))


def trusted_statement(envelope: Any, trusted: Sequence[PublicKey], where: str) -> tuple[bytes, PublicKey]:
    """The in-toto payload of `envelope` and the trusted key that signed it (verdicts and snapshots alike);
    NotVerified naming `where` when no trusted key signed it."""
    try:
        return verify(envelope, IN_TOTO, trusted)
    except EnvelopeError as exc:
        msg = f"{where}: {exc.message}"
        raise NotVerified(msg, hint=exc.hint) from None


def verify(envelope: Any, payload_type: str, trusted: Sequence[PublicKey]) -> tuple[bytes, PublicKey]:
    """The payload of `envelope` and the trusted key that signed it; EnvelopeError when the envelope is
    malformed, of another payload type, or signed by no key of `trusted`."""
    if isinstance(envelope, Unreadable):
        msg = f"the envelope is not read: {envelope.reason}"
        raise EnvelopeError(msg, hint="an envelope that two readers could read otherwise counts for nothing")
    if not isinstance(envelope, Mapping):
        msg = "not a signed envelope (a JSON object with payloadType, payload and signatures)"
        raise EnvelopeError(msg, hint="it was not written by a verifier of this project")
    kind, body, signatures = envelope.get("payloadType"), envelope.get("payload"), envelope.get("signatures")
    if kind != payload_type:
        msg = f"the envelope holds {kind!r}, not {payload_type!r}"
        raise EnvelopeError(msg, hint="a signature made for one kind of document never stands for another")
    try:
        payload = base64.b64decode(str(body), validate=True)
    except (binascii.Error, ValueError):
        msg = "the envelope's payload is not base64"
        raise EnvelopeError(msg, hint="it was damaged or edited after signing") from None
    for entry in signatures if isinstance(signatures, list) else []:
        key = _signer(entry, payload_type, payload, trusted)
        if key is not None:
            return payload, key
    names = ", ".join(k.name for k in trusted) or "none"
    msg = f"no valid signature by a trusted key (trusted: {names})"
    raise EnvelopeError(msg, hint="the record was edited after signing, or another key signed it; "
                                  "pass the signer's public key with --trust-key only if you trust it")


def _signer(entry: Any, payload_type: str, payload: bytes, trusted: Sequence[PublicKey]) -> PublicKey | None:
    if not isinstance(entry, Mapping):
        return None
    try:
        signature = base64.b64decode(str(entry.get("sig", "")), validate=True)
    except (binascii.Error, ValueError):
        return None
    for key in trusted:  # the keyid is a hint only (cosign leaves it empty): every trusted key is tried
        try:
            key.key.verify(signature, pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            continue
        return key
    return None


def payload_json(payload: bytes, *, fields: frozenset[str] = frozenset(), free: frozenset[str] = frozenset()) -> Any:
    """The JSON document a verified payload holds, read with the one strict reader (`fields` and `free` as
    strictjson takes them); EnvelopeError when it holds none, or one that two readers could read otherwise."""
    try:
        return strictjson.loads(payload, fields=fields, free=free)
    except strictjson.Ambiguous as exc:
        msg = f"the signed payload is refused: {exc}"
        raise EnvelopeError(msg, hint="a signed document that two readers could read otherwise vouches for "
                                      "nothing; no verifier of this project writes one") from None


def claimed_predicate(envelope: Any, *, fields: frozenset[str]) -> str | None:
    """The predicate type an in-toto envelope's payload says it holds, read strictly (`fields`), not yet who signed
    it: where a reader sorts what a digest carries (a snapshot, an SBOM, a verdict). None for anything else."""
    if not isinstance(envelope, Mapping) or envelope.get("payloadType") != IN_TOTO:
        return None
    try:
        document = payload_json(base64.b64decode(str(envelope.get("payload")), validate=True), fields=fields)
    except (binascii.Error, ValueError, EnvelopeError):
        return None
    kind = document.get("predicateType") if isinstance(document, dict) else None
    return kind if isinstance(kind, str) else None
