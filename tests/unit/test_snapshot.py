"""The snapshot the promote job signs (trust/snapshot.py): one strict form, read as verdicts are, and the promote
side (publish/snapshots.py) against a registry that holds attachments in a list (cosign stood in for: the real
one attaches them in tests/integration/test_check_weighed.py and test_promote_by_digest.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from buildscripts.errors import NotVerified, RegistryError
from buildscripts.publish import snapshots
from buildscripts.trust import attached, cosign, dsse, keys, snapshot, verdicts
from tests.unit.test_check_logic import DIGEST, envelope

NOW = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)
REF = f"r.example/sglang@{DIGEST}"
KEY = keys.SigningKey("promoter", keys.generate())


def document(version: int = 1) -> dict[str, Any]:
    passed = envelope(KEY, "sm_100a")
    found = attached.read([passed], DIGEST, [KEY.public])
    listed = [snapshot.Listed(i, v.arch, v.result, v.signed_at) for i, v in found.verdicts.items()]
    return snapshot.statement("r.example/sglang", DIGEST, version, NOW, listed)


def signed(payload: bytes) -> dict[str, Any]:
    return dsse.sign(payload, dsse.IN_TOTO, KEY)


def edited(change: Callable[[dict[str, Any]], None]) -> bytes:
    doc = copy.deepcopy(document())
    change(doc)
    return json.dumps(doc).encode()


def test_a_snapshot_reads_back_as_signed() -> None:
    found = snapshot.open_snapshot(snapshot.sign(document(4), KEY), [KEY.public])
    assert found.version == 4 and found.digest == DIGEST and found.signed_at == NOW
    [listed] = found.verdicts
    assert listed.arch == "sm_100a" and listed.result == "PASSED" and listed.signed_at == "2026-12-01T10:00:00Z"
    assert listed.id == snapshot.verdict_id(envelope(KEY, "sm_100a"))   # the payload's, whatever signs it


MALFORMED = {
    "a key twice": lambda: json.dumps(document()).replace('"version": 1', '"version": 9, "version": 1').encode(),
    "a field in another case": lambda: json.dumps(document()).replace('"version"', '"Version"').encode(),
    "a version as a float": lambda: json.dumps(document()).replace('"version": 1', '"version": 1.0').encode(),
    "a version as a bool": lambda: edited(lambda d: d["predicate"].update(version=True)),
    "a version of 0": lambda: edited(lambda d: d["predicate"].update(version=0)),
    "a version past 2**53": lambda: edited(lambda d: d["predicate"].update(version=2**53)),
    "a time with a fraction": lambda: edited(lambda d: d["predicate"].update(signedAt="2026-12-01T13:00:00.5Z")),
    "a time in another zone": lambda: edited(lambda d: d["predicate"].update(signedAt="2026-12-01T14:00:00+01:00")),
    "two subjects": lambda: edited(lambda d: d["subject"].append(copy.deepcopy(d["subject"][0]))),
    "an extra predicate field": lambda: edited(lambda d: d["predicate"].update(expires="2027-01-01T00:00:00Z")),
    "a verdict listed twice": lambda: edited(lambda d: d["predicate"]["verdicts"].append(
        d["predicate"]["verdicts"][0])),
    "a listed arch in upper case": lambda: edited(lambda d: d["predicate"]["verdicts"][0].update(arch="SM_100A")),
    "a listed digest that is short": lambda: edited(lambda d: d["predicate"]["verdicts"][0].update(
        digest={"sha256": "abc"})),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_snapshot_not_in_its_one_form_counts_for_nothing(name: str) -> None:
    with pytest.raises(snapshot.MalformedSnapshot, match=r"not in its one form: .*"):
        snapshot.open_snapshot(signed(MALFORMED[name]()), [KEY.public])


def test_a_snapshot_is_told_from_a_verdict_and_each_is_read_only_as_itself() -> None:
    verdict, snap = envelope(KEY, "sm_100a"), snapshot.sign(document(), KEY)
    assert snapshot.is_snapshot(snap) and not snapshot.is_snapshot(verdict) and not snapshot.is_snapshot("junk")
    with pytest.raises(NotVerified, match="not an in-toto test-result Statement"):
        verdicts.open_verdict(snap, [KEY.public])   # a snapshot never counts as a verdict
    with pytest.raises(snapshot.MalformedSnapshot, match="a snapshot is a"):
        snapshot.open_snapshot(verdict, [KEY.public])


# ---------------------------------------------------------------- the promote side


class Registry:
    """The attachments of one digest, as cosign downloads and attaches them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *attached: Any) -> None:
        self.attached = list(attached)
        self.attach_calls = 0
        monkeypatch.setattr(cosign, "download", lambda ref, env=None, **_: [copy.deepcopy(e) for e in self.attached])
        monkeypatch.setattr(cosign, "attach", self._attach)

    def _attach(self, path: Path, ref: str, env: Any = None, **_: Any) -> None:
        assert ref == REF
        self.attach_calls += 1
        self.attached.append(json.loads(path.read_text()))

    def snapshots(self) -> list[snapshot.Snapshot]:
        return list(attached.read(self.attached, DIGEST, [KEY.public]).snapshots)


def attach(now: datetime = NOW) -> snapshot.Snapshot | None:
    return snapshots.attach_current(REF, [KEY.public], KEY, {}, now=now)


def test_the_promote_job_numbers_its_snapshots_and_lists_what_is_attached(monkeypatch: pytest.MonkeyPatch) -> None:
    passed = envelope(KEY, "sm_100a")
    registry = Registry(monkeypatch, passed, envelope(keys.SigningKey("x", keys.generate()), "sm_120a"))
    first = attach()
    assert first is not None and [v.id for v in first.verdicts] == [snapshot.verdict_id(passed)]   # not a stranger's
    assert first.version == int(NOW.timestamp())   # numbered from the clock: past any snapshot a registry hid
    assert attach() is None and registry.attach_calls == 1   # nothing new: no new snapshot
    failed = envelope(KEY, "sm_120a", fail=True)
    registry.attached.append(failed)
    second = attach(NOW + timedelta(hours=1))
    assert second is not None and second.version == first.version + 3600 and len(second.verdicts) == 2
    assert [s.version for s in registry.snapshots()] == [first.version, second.version]
    registry.attached.append(envelope(KEY, "sm_90a"))
    third = attach(NOW + timedelta(minutes=58))   # a clock set back, within the skew: one more all the same
    assert third is not None and third.version == second.version + 1 and third.signed_at == second.signed_at
    registry.attached.append(envelope(KEY, "sm_120a", at="2026-12-01T10:00:01Z"))
    with pytest.raises(RegistryError, match="ahead of this machine's clock"):   # set back further: refused
        attach(NOW)


def test_no_snapshot_is_signed_over_a_rollback(monkeypatch: pytest.MonkeyPatch) -> None:
    passed, failed = envelope(KEY, "sm_100a"), envelope(KEY, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    registry = Registry(monkeypatch, passed, failed)
    attach()
    registry.attached.remove(failed)   # the tag re-pointed at a set without the FAILED one, its snapshot kept
    registry.attached.append(envelope(KEY, "sm_120a"))   # and a new verdict to promote
    with pytest.raises(RegistryError, match="no snapshot of its verdicts is signed: rollback"):
        attach(NOW + timedelta(hours=1))
    assert registry.attach_calls == 1


def test_a_snapshot_is_never_dated_before_the_previous_one(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry(monkeypatch, envelope(KEY, "sm_100a"))
    attach(NOW + timedelta(minutes=3))   # a promoting machine whose clock ran ahead, within the skew
    registry.attached.append(envelope(KEY, "sm_120a"))
    second = attach(NOW)
    assert second is not None and second.signed_at == NOW + timedelta(minutes=3)


def test_a_snapshot_that_is_not_returned_after_attaching_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry(monkeypatch, envelope(KEY, "sm_100a"))
    monkeypatch.setattr(cosign, "attach", lambda path, ref, env=None, **_: None)   # another writer replaced it
    with pytest.raises(RegistryError, match=f"does not return snapshot {int(NOW.timestamp())}"):
        attach()
    assert registry.snapshots() == []
