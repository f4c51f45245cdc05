"""When a signed verdict was signed, and which of several is the newest: bounded by the checking machine's clock
and ordered at the resolution the verifier writes.

- The verifier writes `signedAt` in UTC to the whole second (`stamp`: `2026-12-01T10:00:00Z`), the only spelling
  a verdict may have (verdict_form.STAMP: one with a fraction or another zone is malformed, and counts against its
  digest). Verdicts are ordered at that resolution, so two of one second are a tie; a tie in which any verdict
  did not pass is not verified (verdicts.judge). `second_of` drops a fraction before any comparison all the same,
  so that no spelling could order two times of one second.
- A verdict dated more than SKEW after the checking machine's clock (`ahead`) cannot be placed: no verifier's
  clock is that far ahead, and a date in the future would outrank every verdict signed until then. It never
  counts, and the arch it names is not verified while it is shown (it could be newer than every other verdict,
  or not). A snapshot of the verdicts (snapshot.py) is held to the same bound (attached.py). The clock is passed
  in (`now`), so that tests need no waiting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

# How far a verifier's clock may run ahead of the checking machine's: NTP keeps clocks within a second, and
# five minutes is the allowance Kerberos and most token checks give for clocks set by hand.
SKEW = timedelta(minutes=5)
SKEW_TEXT = "5 min"


def stamp(when: datetime) -> str:
    """`2026-12-01T10:00:00Z`: a time as the verifier signs it, in UTC to the whole second."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time with its zone (`…Z` or `…+00:00`), in UTC; None for anything else (no zone: no order;
    a time that has no UTC equivalent, as year 9999 at a zone west of Greenwich)."""
    if not isinstance(value, str):
        return None
    try:
        found = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        return found.astimezone(UTC) if found.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


def second_of(when: datetime) -> datetime:
    """`when` in UTC without its fraction of a second: the resolution at which verdicts are ordered."""
    return when.astimezone(UTC).replace(microsecond=0)


def ahead(when: datetime, now: datetime) -> str | None:
    """Why a verdict signed at `when` cannot be placed, checked at `now` (None: it can)."""
    if when <= now + SKEW:
        return None
    return (f"signed {stamp(when)}, {age_text((now - when).total_seconds())}: more than {SKEW_TEXT} after this "
            f"machine's clock ({stamp(now)}), so it cannot be placed among the others")


def age_text(seconds: float) -> str:
    """`3 h ago`, or `2 d ahead of this machine's clock` for a time in the future."""
    later = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            amount = f"{seconds / size:.0f} {unit}"
            break
    else:
        amount = f"{seconds:.0f} s"
    return f"{amount} ahead of this machine's clock" if later else f"{amount} ago"
