"""A signed snapshot of the verdicts of one digest: what the promote job saw attached, numbered and dated.

TUF's snapshot role, for one image digest: the promote job, once it has attached the verdicts of a digest, signs
an in-toto Statement (predicate type SNAPSHOT) whose subject is that digest and whose predicate names
- `version`: one more than the newest snapshot attached to the digest, and at least the signing time in seconds
  since the epoch (so that a promote job from which a registry hid the newest one still numbers past it);
- `signedAt`: when, in UTC to the whole second, as verdicts are dated (freshness.py), never before the previous
  snapshot's time;
- `verdicts`: every verdict a trusted key signed for the digest that is attached then, each by the sha256 of its
  signed payload (`verdict_id`: the Statement's bytes, whatever signatures wrap them), with its arch, result and
  signing time for messages.
It is signed with the key the verdicts are signed with, in the same envelope, and attached beside them in the
digest's `.att` tag (publish/snapshots.py). A reader that kept an older snapshot, or a verdict it lists, then knows
when the registry serves less than it once did (rollback.py); the snapshot alone tells a first reader when the
registry serves less than the promote job attached (attached.py).

The payload is read with the one strict reader, and held to one form here (as verdict_form.py holds a verdict's).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import NotVerified
from . import dsse, freshness, verdict_form
from .keys import PublicKey, SigningKey
from .statement import STATEMENT_TYPE
from .verdict_form import ARCH, HEX64, RESULTS, STAMP, Malformed, shown

SNAPSHOT = "urn:sglang-images:verdict-snapshot:v1"
FIELDS = frozenset({"_type", "subject", "predicateType", "predicate", "name", "digest", "sha256",
                    "version", "signedAt", "verdicts", "arch", "result"})
LISTED = ("digest", "arch", "result")                  # each entry of `verdicts`; `signedAt` when the verdict has one
MAX_VERSION = 2**53 - 1                                # read alike as an integer by every JSON reader


@dataclass(frozen=True)
class Listed:
    """One verdict a snapshot lists: its id (`sha256:` of its payload), and what it said, for messages."""

    id: str
    arch: str | None
    result: str
    signed_at: str | None

    def said(self) -> str:
        """`sm_100a FAILED, signed 2026-12-01T11:00:00Z`."""
        return f"{self.arch or 'no arch'} {self.result}" + (f", signed {self.signed_at}" if self.signed_at else "")


@dataclass(frozen=True)
class Snapshot:
    """A snapshot a trusted key signed."""

    id: str                          # sha256: of its payload
    digest: str                      # the image digest it is for
    version: int
    signed_at: datetime
    verdicts: tuple[Listed, ...]
    signer: PublicKey

    def said(self) -> str:
        return f"snapshot {self.version} (signed {freshness.stamp(self.signed_at)})"


def payload_id(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def verdict_id(envelope: Any) -> str | None:
    """The id of the payload `envelope` carries (None: it carries no base64 payload)."""
    try:
        return payload_id(base64.b64decode(str(envelope.get("payload")), validate=True))
    except (AttributeError, binascii.Error, ValueError):
        return None


def is_snapshot(envelope: Any) -> bool:
    """Whether `envelope` says it holds a snapshot (not yet whether anyone trusted signed it): where it is read."""
    return dsse.claimed_predicate(envelope, fields=FIELDS) == SNAPSHOT


def statement(repository: str, digest: str, version: int, signed_at: datetime,
              listed: Sequence[Listed]) -> dict[str, Any]:
    entries = []
    for item in sorted(listed, key=lambda v: v.id):
        entry: dict[str, Any] = {"digest": {"sha256": item.id.removeprefix("sha256:")}, "arch": item.arch,
                                 "result": item.result}
        if item.signed_at:
            entry["signedAt"] = item.signed_at
        entries.append(entry)
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": SNAPSHOT,
            "predicate": {"version": version, "signedAt": freshness.stamp(signed_at), "verdicts": entries}}


def sign(document: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    return dsse.sign(json.dumps(document, sort_keys=True, separators=(",", ":")).encode(), dsse.IN_TOTO, key)


class MalformedSnapshot(NotVerified):
    """A payload a trusted key signed that is not in the one form of a snapshot: it cannot be set aside as a
    stranger's can (it could list what the others do not), so it counts against the digest (served.problem)."""


def open_snapshot(envelope: Any, trusted: Sequence[PublicKey], *, where: str = "the snapshot") -> Snapshot:
    """What a snapshot a trusted key signed says; NotVerified (naming `where`) when no trusted key signed it,
    MalformedSnapshot when one did but it is not in the one form of a snapshot."""
    payload, signer = dsse.trusted_statement(envelope, trusted, where)
    try:
        return _read(dsse.payload_json(payload, fields=FIELDS), payload_id(payload), signer)
    except (dsse.EnvelopeError, Malformed) as exc:
        msg = f"{where}: a trusted key signed a snapshot not in its one form: {exc}"
        raise MalformedSnapshot(msg, hint="no promote job of this project writes one: find who signed it") from None


def _read(document: Any, found_id: str, signer: PublicKey) -> Snapshot:
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE \
            or document.get("predicateType") != SNAPSHOT:
        msg = f"a snapshot is a {STATEMENT_TYPE} of {SNAPSHOT}"
        raise Malformed(msg)
    digests = verdict_form.subject_digests(document.get("subject"))
    if len(digests) != 1:
        msg = "subject: a snapshot is for one digest"
        raise Malformed(msg)
    predicate = document.get("predicate")
    if not isinstance(predicate, dict) or sorted(predicate) != ["signedAt", "verdicts", "version"]:
        msg = "predicate: not {version, signedAt, verdicts} alone"
        raise Malformed(msg)
    version = predicate["version"]
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= MAX_VERSION:
        msg = f"predicate.version: {shown(version)} is not a whole number from 1 to {MAX_VERSION}"
        raise Malformed(msg)
    signed_at = _stamp(predicate["signedAt"], "predicate.signedAt")
    if signed_at is None:
        msg = "predicate.signedAt: missing"
        raise Malformed(msg)
    return Snapshot(found_id, digests[0], version, signed_at, _listed(predicate["verdicts"]), signer)


def _stamp(value: Any, where: str) -> datetime | None:
    when = freshness.parse_time(value) if isinstance(value, str) and re.fullmatch(STAMP, value) else None
    if value is not None and when is None:
        msg = f"{where}: {shown(value)} is not a time to the second in UTC (2026-12-01T21:05:09Z)"
        raise Malformed(msg)
    return when


def _listed(entries: Any) -> tuple[Listed, ...]:
    if not isinstance(entries, list):
        msg = "predicate.verdicts: not a list"
        raise Malformed(msg)
    found: dict[str, Listed] = {}
    for number, entry in enumerate(entries):
        where = f"predicate.verdicts[{number}]"
        if not isinstance(entry, dict) or sorted(set(entry) - {"signedAt"}) != sorted(LISTED):
            msg = f"{where}: not {{digest, arch, result[, signedAt]}} alone"
            raise Malformed(msg)
        digest = entry["digest"]
        if not isinstance(digest, dict) or list(digest) != ["sha256"] or not _full(HEX64, digest["sha256"]):
            msg = f"{where}.digest: not {{\"sha256\": 64 lower-case hex digits}} alone"
            raise Malformed(msg)
        if not _full(ARCH, entry["arch"]) or entry["result"] not in RESULTS:
            msg = f"{where}: {shown(entry['arch'])} {shown(entry['result'])} is no arch and result of a verdict"
            raise Malformed(msg)
        _stamp(entry.get("signedAt"), f"{where}.signedAt")
        item = Listed(f"sha256:{digest['sha256']}", entry["arch"], entry["result"], entry.get("signedAt"))
        if item.id in found:
            msg = f"{where}: {item.id} is listed twice"
            raise Malformed(msg)
        found[item.id] = item
    return tuple(found.values())


def _full(pattern: str, value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None
