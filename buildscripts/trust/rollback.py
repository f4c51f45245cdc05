"""No going back: a reader keeps the newest snapshot and verdicts it has seen per digest (seen.py), and refuses a
registry that serves less, as TUF's clients refuse older metadata.

`weigh` is the one function a reader calls per digest (`check` through sources.check, and `here`): it reads what is
attached (attached.py), applies the rules that need no memory, then compares with what it kept:
- a newest snapshot numbered lower than the kept one, dated earlier, or another one of the same number: refused;
- a verdict the kept snapshot lists, or any verdict seen attached before, that is not served now: refused. Only
  verdicts of keys trusted now are asked for: a key you stopped trusting is not asked to be served;
- a snapshot dated more than freshness.SKEW after this machine's clock: refused (attached.py), and never kept;
- otherwise what is served is kept (the newer snapshot, every verdict seen), and the verdicts are weighed.
First contact (nothing kept for the digest) trusts what it sees, saying so, as TUF trusts the root it starts
from; docs/trust.md says what this protects and what not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from . import attached, freshness, seen
from .keys import PublicKey
from .seen import History, Kept, KeptSnapshot, KeptVerdict
from .snapshot import Snapshot

FIX = ("use the registry that served the newer verdicts (a mirror may lag behind), or ask its owners why; only if "
       "you know why it went back, remove {path} to trust what is served now, as at first contact")


@dataclass(frozen=True)
class Outcome:
    """What a reader may weigh of one digest, and what it kept."""

    envelopes: tuple[Any, ...]       # the verdicts (snapshots taken out), for verdicts.judge
    refused: str | None              # why none of them may count: the registry went back, or disagrees with itself
    note: str                        # what the history said: first contact, newer than before, as last seen
    ignored: tuple[str, ...]         # snapshots that count for nothing, and why


def weigh(digest: str, envelopes: Sequence[Any], where: str, trusted: Sequence[PublicKey], history: History | None,
          *, now: datetime) -> Outcome:
    """What `envelopes` (attached to `digest`, found through `where`) may count for, against what `history` kept
    (None: no history is kept, only the rules that need none apply); keeps what it accepts."""
    found = attached.read(envelopes, digest, trusted)
    refused = attached.problem(found, now)
    if history is None or not seen.is_digest(digest):   # verdicts name sha256 digests only: nothing to keep
        return Outcome(found.envelopes, refused, "", found.ignored)
    with history.locked():
        kept = history.read(digest)
        path = history.path(digest)
        refused = refused or went_back(kept, found, trusted, path)
        if refused is None:
            history.keep(remember(kept, found, where, now))
    return Outcome(found.envelopes, refused, "" if refused else _note(kept, found, path), found.ignored)


def went_back(kept: Kept | None, found: attached.Served, trusted: Sequence[PublicKey], path: Path) -> str | None:
    """Why what is served now is older than what was kept (None: it is not)."""
    if kept is None:
        return None
    ours = {k.keyid for k in trusted}
    last = f"last seen {kept.seen_at} through {kept.where}"
    fix = FIX.format(path=path)
    before = kept.snapshot
    newest = attached.newest(found)
    if before is not None and before.signer in ours and newest is not None:
        why = _older(before, newest)
        if why:
            return f"rollback: the registry serves {newest.said()} of {kept.digest}, {why} ({last}); {fix}"
    listed = set(before.verdicts) if before is not None and before.signer in ours else set()
    missing = sorted(i for i in listed | {i for i, v in kept.verdicts.items() if v.signer in ours}
                     if i not in found.verdicts)
    if missing:
        said = "; ".join(_said(kept, i) for i in missing[:3]) + (f"; and {len(missing) - 3} more"
                                                                  if len(missing) > 3 else "")
        return (f"rollback: the registry does not serve {len(missing)} verdict{'s' if len(missing) > 1 else ''} of "
                f"{kept.digest} seen before ({said}; {last}): a verdict is hidden; {fix}")
    return None


def _older(before: KeptSnapshot, newest: Snapshot) -> str | None:
    when = freshness.stamp(newest.signed_at)
    if newest.version < before.version:
        return f"older than snapshot {before.version} (signed {before.signed_at})"
    if newest.version == before.version and newest.id != before.id:
        return f"another than the snapshot {before.version} seen (signed {before.signed_at}): a fork"
    if when < before.signed_at:   # both are UTC stamps to the second: their text sorts as their time
        return f"dated before snapshot {before.version} (signed {before.signed_at})"
    return None


def _said(kept: Kept, verdict_id: str) -> str:
    seen = kept.verdicts.get(verdict_id)
    if seen is None:
        return f"{verdict_id[:19]}…, listed by snapshot {kept.snapshot.version if kept.snapshot else '?'}"
    return attached.Verdict(seen.arch, seen.result, seen.signed_at, seen.signer).said()


def remember(kept: Kept | None, found: attached.Served, where: str, now: datetime) -> Kept:
    """What to keep once `found` was accepted: its newest snapshot (else the one kept) and every verdict seen."""
    newest = attached.newest(found)
    snapshot = kept.snapshot if kept is not None else None
    if newest is not None:
        snapshot = KeptSnapshot(id=newest.id, version=newest.version, signed_at=freshness.stamp(newest.signed_at),
                                signer=newest.signer.keyid, verdicts=sorted(v.id for v in newest.verdicts))
    verdicts = dict(kept.verdicts) if kept is not None else {}
    verdicts.update({i: KeptVerdict(arch=v.arch, result=v.result, signed_at=v.signed_at, signer=v.signer)
                     for i, v in found.verdicts.items()})
    return Kept(digest=found.digest, seen_at=freshness.stamp(now), where=where, snapshot=snapshot,
                verdicts=dict(sorted(verdicts.items())))


def _note(kept: Kept | None, found: attached.Served, path: Path) -> str:
    newest = attached.newest(found)
    what = newest.said() if newest else "no snapshot"
    count = f"{len(found.verdicts)} verdict{'s' if len(found.verdicts) != 1 else ''}"
    if kept is None:
        return (f"first contact with {found.digest}: what is served now ({count}, {what}) is trusted as it is "
                f"(trust on first use), and kept in {path}")
    if newest is not None and (kept.snapshot is None or newest.version > kept.snapshot.version):
        was = f"snapshot {kept.snapshot.version}" if kept.snapshot else "none"
        return f"newer than last seen ({kept.seen_at}): {what}, was {was}; {count}"
    return f"nothing went back since last seen ({kept.seen_at}): {what}, {count}"
