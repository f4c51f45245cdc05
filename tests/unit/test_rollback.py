"""No going back, without a registry: the state a reader keeps per digest (trust/seen.py) and the rules that
refuse a registry serving less than it once did (trust/rollback.py, trust/attached.py). The clock is passed in;
verdicts and snapshots are signed here with a key of the test."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from buildscripts.errors import CannotCheck
from buildscripts.trust import attached, freshness, keys, rollback, seen, snapshot, sources
from buildscripts.trust.sources import Source
from tests.unit.test_check_logic import DIGEST, envelope

NOW = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("verifier", keys.generate())


@pytest.fixture
def history(tmp_path: Path) -> seen.History:
    return seen.History(tmp_path / "state")


def snap(key: keys.SigningKey, version: int, listed: Sequence[Any], *, at: datetime = NOW - timedelta(hours=1),
         digest: str = DIGEST) -> dict[str, Any]:
    """The snapshot the promote job signs: number `version`, listing the verdict envelopes `listed`."""
    found = attached.read(listed, digest, [key.public])
    items = [snapshot.Listed(i, v.arch, v.result, v.signed_at) for i, v in found.verdicts.items()]
    return snapshot.sign(snapshot.statement("r.example/sglang", digest, version, at, items), key)


def weigh(history: seen.History | None, key: keys.SigningKey, *attached: Any, now: datetime = NOW,
          trusted: Sequence[keys.PublicKey] | None = None) -> rollback.Outcome:
    return rollback.weigh(DIGEST, attached, "r.example/sglang@" + DIGEST, trusted or [key.public], history, now=now)


def kept(history: seen.History) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(history.path(DIGEST).read_text())
    return data


# ---------------------------------------------------------------- the state logic


def test_first_contact_trusts_what_it_sees_says_so_and_keeps_it(key: keys.SigningKey, history: seen.History) -> None:
    passed = envelope(key, "sm_100a")
    outcome = weigh(history, key, passed, snap(key, 1, [passed]))
    assert outcome.refused is None and outcome.envelopes == (passed,)   # the snapshot is no verdict to weigh
    assert "first contact" in outcome.note and "trust on first use" in outcome.note
    state = kept(history)
    assert state["snapshot"]["version"] == 1 and list(state["verdicts"]) == [snapshot.verdict_id(passed)]
    assert state["seen_at"] == "2026-12-01T13:00:00Z"


def test_a_newer_snapshot_is_accepted_and_kept(key: keys.SigningKey, history: seen.History) -> None:
    passed = envelope(key, "sm_100a", at="2026-12-01T10:00:00Z")
    weigh(history, key, passed, snap(key, 1, [passed], at=NOW - timedelta(hours=2)))
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    outcome = weigh(history, key, passed, failed, snap(key, 1, [passed], at=NOW - timedelta(hours=2)),
                    snap(key, 2, [passed, failed]))
    assert outcome.refused is None and "newer than last seen" in outcome.note and "was snapshot 1" in outcome.note
    assert kept(history)["snapshot"]["version"] == 2 and len(kept(history)["verdicts"]) == 2
    again = weigh(history, key, passed, failed, snap(key, 2, [passed, failed]))   # the same, seen again
    assert again.refused is None and "nothing went back" in again.note


def test_an_older_snapshot_is_refused_and_the_newer_stays_kept(key: keys.SigningKey, history: seen.History) -> None:
    passed = envelope(key, "sm_100a", at="2026-12-01T10:00:00Z")
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    weigh(history, key, passed, failed, snap(key, 2, [passed, failed]))
    before = history.path(DIGEST).read_bytes()
    # the older set, its older snapshot with it: what a writer who re-points the attestation tag serves
    outcome = weigh(history, key, passed, snap(key, 1, [passed], at=NOW - timedelta(hours=2)))
    assert outcome.refused is not None and outcome.refused.startswith("rollback: the registry serves snapshot 1")
    assert "older than snapshot 2" in outcome.refused and "last seen 2026-12-01T13:00:00Z" in outcome.refused
    assert f"remove {history.path(DIGEST)}" in outcome.refused   # how to fix
    assert history.path(DIGEST).read_bytes() == before


def test_an_older_snapshot_is_refused_even_when_its_verdicts_are_all_there(key: keys.SigningKey,
                                                                           history: seen.History) -> None:
    passed = envelope(key, "sm_100a")
    weigh(history, key, passed, snap(key, 2, [passed]))
    outcome = weigh(history, key, passed, snap(key, 1, [passed]))
    assert outcome.refused is not None and "older than snapshot 2" in outcome.refused


@pytest.mark.parametrize("with_snapshot", [True, False])
def test_a_set_that_lacks_a_verdict_seen_is_refused(key: keys.SigningKey, history: seen.History,
                                                    with_snapshot: bool) -> None:
    """With or without snapshots: a verdict seen attached once and not served now is a hidden verdict."""
    passed = envelope(key, "sm_100a", at="2026-12-01T10:00:00Z")
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    first = [snap(key, 1, [passed, failed])] if with_snapshot else []
    assert weigh(history, key, passed, failed, *first).refused is None
    outcome = weigh(history, key, passed)   # the snapshot hidden too
    assert outcome.refused is not None and "does not serve 1 verdict" in outcome.refused
    assert "sm_100a FAILED, signed 2026-12-01T11:00:00Z" in outcome.refused
    assert kept(history)["verdicts"].keys() == {snapshot.verdict_id(passed), snapshot.verdict_id(failed)}


def test_a_verdict_served_with_a_broken_signature_is_not_served(key: keys.SigningKey, history: seen.History) -> None:
    failed = envelope(key, "sm_100a", fail=True)
    weigh(history, key, failed)
    broken = {**failed, "signatures": [{"keyid": "", "sig": ""}]}   # the payload, without what makes it count
    outcome = weigh(history, key, broken)
    assert outcome.refused is not None and "does not serve 1 verdict" in outcome.refused


def test_a_snapshot_that_lists_what_is_not_served_is_refused_at_first_contact(key: keys.SigningKey,
                                                                              history: seen.History) -> None:
    passed = envelope(key, "sm_100a", at="2026-12-01T10:00:00Z")
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    outcome = weigh(history, key, passed, snap(key, 1, [passed, failed]))
    assert outcome.refused is not None and "which lists 1 verdict (sm_100a FAILED" in outcome.refused
    assert not history.path(DIGEST).exists()   # refused: nothing kept
    assert weigh(None, key, passed, snap(key, 1, [passed, failed])).refused == outcome.refused   # no history: the same


@pytest.mark.parametrize(("ahead", "refused"), [(freshness.SKEW, False), (freshness.SKEW + timedelta(seconds=1), True),
                                                (timedelta(days=400), True)])
def test_a_snapshot_dated_beyond_the_clock_and_skew_is_refused_and_not_kept(
        key: keys.SigningKey, history: seen.History, ahead: timedelta, refused: bool) -> None:
    passed = envelope(key, "sm_100a")
    outcome = weigh(history, key, passed, snap(key, 1, [passed], at=NOW + ahead))
    assert (outcome.refused is not None) is refused
    if refused:
        assert outcome.refused and "ahead of this machine's clock" in outcome.refused
        assert not history.path(DIGEST).exists()


def test_another_snapshot_of_the_same_number_is_a_fork(key: keys.SigningKey, history: seen.History) -> None:
    passed, other = envelope(key, "sm_100a"), envelope(key, "sm_120a")
    weigh(history, key, passed, other, snap(key, 3, [passed, other]))
    outcome = weigh(history, key, passed, other, snap(key, 3, [passed]))
    assert outcome.refused is not None and "a fork" in outcome.refused
    both = weigh(None, key, passed, other, snap(key, 3, [passed, other]), snap(key, 3, [passed]))
    assert both.refused is not None and "two different snapshots numbered 3" in both.refused


def test_a_higher_number_with_an_older_time_is_refused(key: keys.SigningKey, history: seen.History) -> None:
    passed = envelope(key, "sm_100a")
    weigh(history, key, passed, snap(key, 1, [passed], at=NOW - timedelta(hours=1)))
    outcome = weigh(history, key, passed, snap(key, 2, [passed], at=NOW - timedelta(hours=2)))
    assert outcome.refused is not None and "dated before snapshot 1" in outcome.refused


def test_snapshots_are_ordered_to_the_second_as_verdicts_are(key: keys.SigningKey, history: seen.History) -> None:
    """The promote job dates a snapshot to the second and never before the previous one: one second is no
    order, so two numbers in one second are fine, and the number orders them."""
    passed = envelope(key, "sm_100a")
    weigh(history, key, passed, snap(key, 1, [passed], at=NOW - timedelta(hours=1)))
    assert weigh(history, key, passed, snap(key, 2, [passed], at=NOW - timedelta(hours=1))).refused is None


def test_only_keys_trusted_now_are_asked_for(key: keys.SigningKey, history: seen.History) -> None:
    """A verdict of a key the reader stopped trusting is not asked to be served (it would not count either)."""
    other = keys.SigningKey("another verifier", keys.generate())
    mine, theirs = envelope(key, "sm_100a"), envelope(other, "sm_120a")
    weigh(history, key, mine, theirs, trusted=[key.public, other.public])
    assert weigh(history, key, mine).refused is None
    refused = weigh(history, key, mine, trusted=[key.public, other.public]).refused   # trusted again: asked again
    assert refused is not None and "sm_120a PASSED" in refused


def test_snapshots_of_untrusted_keys_or_other_digests_count_for_nothing(key: keys.SigningKey,
                                                                        history: seen.History) -> None:
    stranger = keys.SigningKey("stranger", keys.generate())
    passed = envelope(key, "sm_100a")
    forged = snap(stranger, 99, [passed])
    elsewhere = snap(key, 98, [], digest="sha256:" + "e" * 64)
    outcome = weigh(history, key, passed, forged, elsewhere)
    assert outcome.refused is None and outcome.envelopes == (passed,)
    assert any("no valid signature by a trusted key" in why for why in outcome.ignored)
    assert any("a snapshot of sha256:eee" in why for why in outcome.ignored)
    assert kept(history)["snapshot"] is None


# ---------------------------------------------------------------- the state file


@pytest.mark.parametrize(("name", "damage"), [
    ("empty", lambda text: ""),
    ("truncated", lambda text: text[: len(text) // 2]),
    ("a key twice", lambda text: text.replace('{\n "format"', '{\n "where": "x",\n "format"', 1)),
    ("another digest's", lambda text: text.replace("d" * 64, "e" * 64)),
    ("an unknown field", lambda text: text.replace('"where"', '"trusted": true,\n "where"', 1)),
    ("a version as text", lambda text: text.replace('"version": 1', '"version": "1"')),
    ("a version of 0", lambda text: text.replace('"version": 1', '"version": 0')),
    ("a time not in UTC", lambda text: text.replace("T13:00:00Z", "T13:00:00+01:00")),
    ("no verdicts field", lambda text: text.replace('"verdicts": {', '"seen": {')),
    ("a verdict id that is none", lambda text: text.replace('"sha256:', '"sha1:')),
])
def test_a_damaged_state_file_stops_the_check_with_its_path(key: keys.SigningKey, history: seen.History,
                                                            name: str, damage: Any) -> None:
    passed = envelope(key, "sm_100a")
    weigh(history, key, passed, snap(key, 1, [passed]))
    path = history.path(DIGEST)
    path.write_text(damage(path.read_text()))
    with pytest.raises(CannotCheck, match="cannot be read") as raised:
        weigh(history, key, passed, snap(key, 1, [passed]))
    assert str(path) in raised.value.message and "first contact" in str(raised.value.hint), name


def test_a_folder_in_place_of_the_state_file_stops_the_check(key: keys.SigningKey, history: seen.History) -> None:
    history.path(DIGEST).mkdir(parents=True)
    with pytest.raises(CannotCheck, match="it is not a file"):
        weigh(history, key, envelope(key, "sm_100a"))


def test_a_state_folder_that_cannot_be_written_stops_the_check(key: keys.SigningKey, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CannotCheck, match="cannot keep what this machine has seen") as raised:
        weigh(seen.History(blocker / "state"), key, envelope(key, "sm_100a"))
    assert "--state-dir" in str(raised.value.hint)


def test_the_state_is_written_whole_in_a_folder_of_its_owner(key: keys.SigningKey, history: seen.History) -> None:
    weigh(history, key, envelope(key, "sm_100a"))
    folder = history.path(DIGEST).parent
    assert sorted(p.name for p in folder.iterdir()) == [".lock", history.path(DIGEST).name]   # no scratch file left
    assert os.stat(folder).st_mode & 0o077 == 0
    assert seen.Kept.model_validate_json(history.path(DIGEST).read_text()).digest == DIGEST


def test_a_digest_is_the_only_name_a_state_file_gets(history: seen.History) -> None:
    with pytest.raises(CannotCheck, match="no sha256 digest"):
        history.path("sha256:../../etc/passwd")


@pytest.mark.parametrize(("env", "given", "folder"), [
    ({"SGLANG_IMAGES_STATE_DIR": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"}, Path("/o"), "/o"),
    ({"SGLANG_IMAGES_STATE_DIR": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"}, None, "/s"),
    ({"XDG_STATE_HOME": "/x", "HOME": "/h"}, None, "/x/sglang-images"),
    ({"XDG_STATE_HOME": "relative", "HOME": "/h"}, None, "/h/.local/state/sglang-images"),   # the XDG spec: ignored
    ({"HOME": "/h"}, None, "/h/.local/state/sglang-images"),
])
def test_where_the_state_is_kept(env: dict[str, str], given: Path | None, folder: str) -> None:
    assert seen.state_dir(env, given) == Path(folder)


# ---------------------------------------------------------------- through sources.check, as `check` and `here` call it


def test_check_refuses_a_rolled_back_digest_and_says_why(key: keys.SigningKey, history: seen.History,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    passed = envelope(key, "sm_100a", at="2026-12-01T10:00:00Z")
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T11:00:00Z")
    served_now: list[Any] = [passed, failed, snap(key, 2, [passed, failed])]
    monkeypatch.setattr(sources, "sources", lambda what, env: [Source(what, DIGEST, tuple(served_now))])
    [(source, judgement)] = sources.check("r.example/sglang:t", [key.public], {}, history=history, now=NOW)
    assert not judgement.verified and source.seen and "first contact" in source.seen
    assert judgement.ignored == ()   # the snapshot is not "ignored": it is read as what it is
    served_now[:] = [passed, snap(key, 1, [passed], at=NOW - timedelta(hours=3))]   # the older set: PASSED decides
    judged = sources.check("r.example/sglang:t", [key.public], {}, history=history, now=NOW)
    verified, line = sources.summary("r.example/sglang:t", judged)
    assert not verified and "rollback: the registry serves snapshot 1" in line
    forgetful = sources.check("r.example/sglang:t", [key.public], {}, history=None, now=NOW)
    assert sources.summary("r.example/sglang:t", forgetful)[0]   # what no history can tell: docs/trust.md


def test_a_malformed_snapshot_a_trusted_key_signed_is_not_set_aside(key: keys.SigningKey,
                                                                    history: seen.History) -> None:
    """It could list a verdict the registry hides: nothing of the digest counts while it is attached."""
    passed = envelope(key, "sm_100a")
    document = json.loads(json.dumps(snapshot.statement("r", DIGEST, 1, NOW, [])))
    document["predicate"]["expires"] = "2027-01-01T00:00:00Z"
    malformed = snapshot.sign(document, key)
    outcome = weigh(history, key, passed, malformed)
    assert outcome.refused is not None and "a trusted key signed a snapshot not in its one form" in outcome.refused
    assert not history.path(DIGEST).exists()


def test_a_digest_no_verdict_can_name_keeps_no_history(key: keys.SigningKey, history: seen.History) -> None:
    """Verdicts name sha256 digests only: a sha512 manifest is simply not verified, never a state file's name."""
    other = "sha512:" + "a" * 128
    outcome = rollback.weigh(other, [envelope(key, "sm_100a")], "r@" + other, [key.public], history, now=NOW)
    assert outcome.refused is None and outcome.note == "" and not history.folder.exists()
