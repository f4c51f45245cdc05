"""Which signed verdict is the newest, with the checking machine's clock passed in: a verdict dated beyond that
clock plus freshness.SKEW counts for nothing and leaves its arch not verified, and verdicts are ordered to the
whole second the verifier writes, whatever fractions or zones their stamps spell."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from buildscripts.trust import freshness, keys, verdicts
from tests.unit.test_check_logic import DIGEST, envelope

NOW = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)


@pytest.fixture
def key() -> keys.SigningKey:
    return keys.SigningKey("verifier", keys.generate())


def at(delta: timedelta) -> str:
    return freshness.stamp(NOW + delta)


def test_a_passed_verdict_dated_ahead_never_outranks_a_later_failure(key: keys.SigningKey) -> None:
    ahead = envelope(key, "sm_100a", at="2029-01-01T00:00:00Z")                  # years ahead: the attack
    failed = envelope(key, "sm_100a", fail=True, at=at(-timedelta(hours=1)))
    found = verdicts.judge([ahead, failed], DIGEST, [key.public], now=NOW)
    [finding] = found.archs
    assert not found.verified and "more than 5 min ahead of this machine's clock" in finding.detail
    assert any("attestation 1 (sm_100a, PASSED): signed 2029-01-01T00:00:00Z" in why and "ahead" in why
               for why in found.ignored)


def test_a_failure_dated_ahead_is_not_outranked_by_an_older_pass_either(key: keys.SigningKey) -> None:
    """It cannot be placed, so it may be the newest: nothing decides, and the arch is not verified."""
    passed = envelope(key, "sm_100a", at=at(-timedelta(hours=2)))
    ahead = envelope(key, "sm_100a", fail=True, at=at(timedelta(days=1)))
    assert not verdicts.judge([passed, ahead], DIGEST, [key.public], now=NOW).verified
    # another arch's verdict dated ahead does not touch this one
    other = envelope(key, "sm_120a", fail=True, at=at(timedelta(days=1)))
    found = verdicts.judge([passed, other], DIGEST, [key.public], ["sm_100a"], now=NOW)
    assert found.verified


@pytest.mark.parametrize(("delta", "counts"), [
    (freshness.SKEW, True), (freshness.SKEW - timedelta(seconds=1), True),
    (freshness.SKEW + timedelta(seconds=1), False),
])
def test_the_skew_is_the_bound(key: keys.SigningKey, delta: timedelta, counts: bool) -> None:
    found = verdicts.judge([envelope(key, "sm_100a", at=at(delta))], DIGEST, [key.public], now=NOW)
    assert found.verified is counts
    if counts:
        assert "ahead of this machine's clock" in found.archs[0].detail   # said, though within the bound


def test_the_same_clock_later_counts_it(key: keys.SigningKey) -> None:
    """The bound is the checking machine's clock, passed in: an hour later the same verdict counts."""
    soon = envelope(key, "sm_100a", at=at(timedelta(minutes=30)))
    assert not verdicts.judge([soon], DIGEST, [key.public], now=NOW).verified
    assert verdicts.judge([soon], DIGEST, [key.public], now=NOW + timedelta(hours=1)).verified


def test_verdicts_of_one_second_are_a_tie(key: keys.SigningKey) -> None:
    passed = envelope(key, "sm_100a", at="2026-12-01T12:00:00Z")
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T12:00:00Z")
    for order in ([passed, failed], [failed, passed]):
        found = verdicts.judge(order, DIGEST, [key.public], now=NOW)
        assert not found.verified and "2 verdicts signed in one second" in found.archs[0].detail


@pytest.mark.parametrize(("passed_at", "failed_at"), [
    ("2026-12-01T12:00:00.999999Z", "2026-12-01T12:00:00.000001Z"),   # fractions of one second
    ("2026-12-01T12:00:00.9Z", "2026-12-01T12:00:00Z"),
    ("2026-12-01T13:00:00.5+01:00", "2026-12-01T12:00:00.1Z"),        # one second, spelled in two zones
])
def test_a_stamp_finer_or_other_than_the_verifiers_is_never_ordered(key: keys.SigningKey, passed_at: str,
                                                                     failed_at: str) -> None:
    """The verifier writes whole seconds in UTC (`Z`); any other spelling is no verdict of its form
    (trust/verdict_form.py): it cannot be placed among the others, so nothing of the digest is verified."""
    passed = envelope(key, "sm_100a", at=passed_at)
    failed = envelope(key, "sm_100a", fail=True, at=failed_at)
    for order in ([passed, failed], [failed, passed]):
        found = verdicts.judge(order, DIGEST, [key.public], ["sm_100a"], now=NOW)
        assert not found.verified and "is not a time to the second in UTC" in found.archs[0].detail


def test_the_next_second_decides(key: keys.SigningKey) -> None:
    failed = envelope(key, "sm_100a", fail=True, at="2026-12-01T12:00:00Z")
    passed = envelope(key, "sm_100a", at="2026-12-01T12:00:01Z")
    assert verdicts.judge([failed, passed], DIGEST, [key.public], now=NOW).verified
    two_passes = [envelope(key, "sm_100a", at="2026-12-01T12:00:00Z"), passed]
    assert verdicts.judge(two_passes, DIGEST, [key.public], now=NOW).verified


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-23:59", "2026-12-01T12:00:60Z", "2026-12-01T12:00:00",
                                   12, None])
def test_times_with_no_place_in_utc_are_undated(value: object) -> None:
    assert freshness.parse_time(value) is None


def test_the_verifier_writes_whole_seconds_in_utc() -> None:
    when = datetime(2026, 12, 1, 13, 0, 0, 750000, tzinfo=UTC)
    assert freshness.stamp(when) == "2026-12-01T13:00:00Z"
    other = freshness.parse_time("2026-12-01T14:00:00.1+01:00")
    assert other is not None and freshness.second_of(when) == freshness.second_of(other) != when
