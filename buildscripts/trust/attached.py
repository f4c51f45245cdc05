"""What the attachments of one digest hold: the verdicts a trusted key signed for it, by id, and its snapshots
(snapshot.py), and whether they agree with each other.

These rules need no memory, so a first reader applies them too (`problem`): a snapshot dated beyond this machine's
clock plus freshness.SKEW, two different snapshots of one number, numbers and times that disagree, and above all a
newest snapshot listing a verdict the registry does not serve (the attestation tag was re-pointed at a set that
lacks it, and the snapshot was left or carried along). What a registry writer rolled back whole, snapshot included,
only a reader that kept what it saw can tell (rollback.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import NotVerified
from . import dsse, freshness, snapshot, verdicts
from .keys import PublicKey
from .snapshot import Snapshot


@dataclass(frozen=True)
class Verdict:
    """A verdict a trusted key signed for the digest, as served: what it said, for messages and the kept state."""

    arch: str | None          # None: a malformed one (it counts against the digest: verdicts.judge)
    result: str
    signed_at: str | None
    signer: str               # the keyid of the key that signed it

    def said(self) -> str:
        return snapshot.Listed("", self.arch, self.result, self.signed_at).said()


@dataclass(frozen=True)
class Served:
    digest: str
    envelopes: tuple[Any, ...]                  # every attachment but the snapshots: what verdicts.judge weighs
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)   # id (sha256 of the payload) -> what it said
    snapshots: tuple[Snapshot, ...] = ()        # those a trusted key signed for this digest, in version order
    ignored: tuple[str, ...] = ()               # snapshots that count for nothing, and why
    malformed: tuple[str, ...] = ()             # snapshots a trusted key signed in no form of one: against it


def read(envelopes: Sequence[Any], digest: str, trusted: Sequence[PublicKey]) -> Served:
    """The verdicts and snapshots of `digest` among `envelopes` (what cosign downloads, or an archive carries)."""
    others: list[Any] = []
    found: dict[str, Verdict] = {}
    snapshots: list[Snapshot] = []
    ignored: list[str] = []
    malformed: list[str] = []
    for number, envelope in enumerate(envelopes, 1):
        if snapshot.is_snapshot(envelope):
            try:
                _snapshot(envelope, digest, trusted, f"attached snapshot {number}", snapshots, ignored)
            except snapshot.MalformedSnapshot as exc:
                malformed.append(exc.message)
            continue
        others.append(envelope)
        seen = _verdict(envelope, digest, trusted)
        key = snapshot.verdict_id(envelope)
        if seen is not None and key is not None:
            found[key] = seen
    snapshots.sort(key=lambda s: (s.version, s.signed_at, s.id))
    return Served(digest, tuple(others), found, tuple(snapshots), tuple(ignored), tuple(malformed))


def _snapshot(envelope: Any, digest: str, trusted: Sequence[PublicKey], where: str, into: list[Snapshot],
              ignored: list[str]) -> None:
    try:
        found = snapshot.open_snapshot(envelope, trusted, where=where)
    except snapshot.MalformedSnapshot:
        raise
    except NotVerified as exc:
        ignored.append(exc.message)
        return
    if found.digest != digest:
        ignored.append(f"{where}: a snapshot of {found.digest}, not of {digest}")
    elif found.id not in {s.id for s in into}:
        into.append(found)


def _verdict(envelope: Any, digest: str, trusted: Sequence[PublicKey]) -> Verdict | None:
    """What a verdict a trusted key signed for `digest` said (None: it is none)."""
    try:
        found = verdicts.open_verdict(envelope, trusted)
    except verdicts.MalformedVerdict as exc:
        if exc.digests and digest not in exc.digests:
            return None
        signer = _signer(envelope, trusted)
        return Verdict(None, "malformed", None, signer) if signer else None
    except NotVerified:
        return None
    if digest not in found.digests:
        return None
    when = freshness.stamp(found.signed_at) if found.signed_at else None
    return Verdict(found.arch, found.result, when, found.signer.keyid)


def _signer(envelope: Any, trusted: Sequence[PublicKey]) -> str | None:
    try:
        return dsse.verify(envelope, dsse.IN_TOTO, trusted)[1].keyid
    except dsse.EnvelopeError:
        return None


def newest(served: Served) -> Snapshot | None:
    return served.snapshots[-1] if served.snapshots else None


def problem(served: Served, now: datetime) -> str | None:
    """Why the attachments of the digest disagree with themselves, so that none of its verdicts may count (None:
    they agree, or hold no snapshot)."""
    if served.malformed:
        return (f"{served.malformed[0]}: it cannot be set aside, so nothing of {served.digest} counts while it "
                "is attached")
    for each in served.snapshots:
        ahead = freshness.ahead(each.signed_at, now)
        if ahead:
            return (f"{each.said()} of {served.digest} is {ahead.removeprefix('signed ')}; check the clock of the "
                    "machine that promoted it, and promote again")
    for older, newer in zip(served.snapshots, served.snapshots[1:], strict=False):
        if older.version == newer.version:
            return (f"rollback or fork: two different snapshots numbered {older.version} of {served.digest} "
                    f"(signed {freshness.stamp(older.signed_at)} and {freshness.stamp(newer.signed_at)}); "
                    "promote again, alone")
        if freshness.second_of(newer.signed_at) < freshness.second_of(older.signed_at):
            return (f"{newer.said()} of {served.digest} is dated before {older.said()}: their order is not "
                    "their time; promote again, alone")
    last = newest(served)
    missing = [v for v in last.verdicts if v.id not in served.verdicts] if last else []
    if last and missing:
        return (f"rollback: the registry serves {last.said()} of {served.digest}, which lists "
                f"{_listed(missing)} that it does not serve (the attestation tag was re-pointed, or the verdict "
                "removed): a verdict is hidden; use the registry the image was promoted to, or ask its owners")
    return None


def _listed(missing: Sequence[snapshot.Listed]) -> str:
    shown = "; ".join(v.said() for v in missing[:3]) + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"{len(missing)} verdict{'s' if len(missing) > 1 else ''} ({shown})"
