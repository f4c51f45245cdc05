"""The promote job's snapshot of a digest's verdicts (trust/snapshot.py): signed and attached right after the
verdicts are, so that a reader who keeps what it saw can refuse a registry that later serves less.

The snapshot lists what is attached, read back from the registry, not what this promotion brought: verdicts
attached by earlier promotions, or carried from the staging repository, are the digest's verdicts too. Before it
signs, what is served is held to the newest snapshot already there (trust/attached.py): a registry that serves
less than that lists was rolled back, and a snapshot of what is left would make the rollback look legitimate, so
the promotion stops, having signed nothing. The version is one more than the newest, and at least the signing
time in seconds since the epoch; the time is never before the newest's.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .. import log
from ..errors import RegistryError
from ..trust import attached, cosign, snapshot, verdicts
from ..trust.keys import PublicKey, SigningKey


def attach_current(ref: str, trusted: Sequence[PublicKey], key: SigningKey, env: Mapping[str, str], *,
                   now: datetime | None = None, log_file: Path | None = None) -> snapshot.Snapshot | None:
    """Sign with `key` and attach a snapshot of the verdicts attached to `ref` (REPO@sha256:…, the platform
    manifest they name); return it, or None when the newest snapshot lists exactly these already, or when no
    verdict is attached. RegistryError, with nothing signed, when the attachments disagree with their newest
    snapshot."""
    repository, digest = verdicts.split_digest_ref(ref)
    now = now or datetime.now(UTC)
    readers = [*trusted, key.public]
    found = attached.read(cosign.download(ref, env, log_file=log_file), digest, readers)
    problem = attached.problem(found, now)
    if problem:
        msg = f"{ref}: no snapshot of its verdicts is signed: {problem}"
        raise RegistryError(msg, hint="attach the hidden verdicts again (their files are in the results of the "
                                      "runs that signed them), or find who re-pointed the attestation tag; then "
                                      "promote again")
    malformed = [i for i, v in found.verdicts.items() if v.arch is None]
    if malformed:
        msg = f"{ref}: a trusted key signed a malformed verdict attached there ({', '.join(malformed)})"
        raise RegistryError(msg, hint="no verifier of this project writes one: find who attached it, and with which "
                                      "key; no snapshot can list it")
    newest = attached.newest(found)
    if not found.verdicts:
        return None
    if newest is not None and {v.id for v in newest.verdicts} == set(found.verdicts):
        log.info(f"{ref}: its verdicts are the ones {newest.said()} lists: no new snapshot")
        return None
    listed = [snapshot.Listed(i, v.arch, v.result, v.signed_at) for i, v in found.verdicts.items()]
    when = max(now, newest.signed_at) if newest else now
    # At least the signing second since the epoch: a promote job from which the registry hid the newest snapshot
    # still numbers past it (readers would take a second one of the same number for a fork).
    version = max(newest.version + 1 if newest else 1, int(when.timestamp()))
    envelope = snapshot.sign(snapshot.statement(repository, digest, version, when, listed), key)
    with tempfile.TemporaryDirectory(prefix="sglang-images-snapshot-") as scratch:
        path = Path(scratch) / f"snapshot-{version}.json"
        path.write_text(json.dumps(envelope) + "\n")
        cosign.attach(path, ref, env, log_file=log_file)
    made = snapshot.open_snapshot(envelope, readers)
    back = attached.read(cosign.download(ref, env, log_file=log_file), digest, readers)
    if made.id not in {s.id for s in back.snapshots}:
        msg = f"{ref}: the registry does not return {made.said()} after attaching it"
        raise RegistryError(msg, hint="another writer replaced the attestations meanwhile; promote again, alone")
    log.info(f"{ref}: signed {made.said()} of {len(listed)} verdict(s) with key {key.public.keyid[:16]}")
    return made
