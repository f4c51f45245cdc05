"""The bisection's search and groups with a fake build: which set of changes it names, and how many builds it
spends, for one culprit, two that only fail together, changes that must move together, a flaky step and a step
that fails for another reason."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pytest

from buildscripts.bisect.diff import compose, lock_diff
from buildscripts.bisect.groups import Group, group_changes
from buildscripts.bisect.search import Outcome, Target, Verdict, bisect
from buildscripts.lock.lockfile import Pin

STAGE = "kernel-smoke"
TARGET = Target(STAGE, "kernel-image-missing")


def pin(version: str) -> Pin:
    return Pin(version, (f"sha256:{version.replace('.', '') * 8:0<64}"[:71],))


def sides(n: int) -> tuple[dict[str, Pin], dict[str, Pin]]:
    good = {f"pkg{i}": pin(f"1.{i}") for i in range(n)}
    bad = {f"pkg{i}": pin(f"2.{i}") for i in range(n)}
    return good, bad


class FakeBuild:
    """Fails at the target stage when every package of one of `culprits` is at its bad version; `script` gives
    outcomes by call for the sets it names (a flaky or other step)."""

    def __init__(self, culprits: list[set[str]], script: Callable[[frozenset[str], int], Outcome | None] = lambda
                 moved, count: None) -> None:
        self.culprits, self.script = culprits, script
        self.calls: list[frozenset[str]] = []

    def __call__(self, pins: Mapping[str, Pin], label: str) -> Outcome:
        moved = frozenset(n for n, p in pins.items() if p.version.startswith("2."))
        self.calls.append(moved)
        scripted = self.script(moved, self.calls.count(moved))
        if scripted is not None:
            return scripted
        if any(c <= moved for c in self.culprits):
            return Outcome(Verdict.FAIL, STAGE, "kernel-image-missing", lines=("RuntimeError: no kernel image",))
        return Outcome(Verdict.PASS)


def groups_of(n: int) -> tuple[list[Group], dict[str, Pin]]:
    good, bad = sides(n)
    return group_changes(lock_diff(good, bad), good, None), good


def culprit_names(groups: list[Group], indexes: tuple[int, ...] | None) -> set[str]:
    assert indexes is not None
    return {name for i in indexes for name in groups[i].names}


@pytest.mark.parametrize("where", range(12))
def test_one_culprit_among_twelve_within_log2_plus_two_builds(where: int) -> None:
    groups, good = groups_of(12)
    build = FakeBuild([{f"pkg{where}"}])
    result = bisect(groups, good, build, TARGET)
    assert culprit_names(groups, result.culprit) == {f"pkg{where}"}
    assert result.confirmed and not result.exhausted and not result.cannot_split
    assert result.builds <= math.ceil(math.log2(12)) + 2
    assert result.failure is not None and result.failure.lines == ("RuntimeError: no kernel image",)


def test_two_culprits_that_only_fail_together_are_named_together() -> None:
    groups, good = groups_of(8)
    build = FakeBuild([{"pkg1", "pkg6"}])
    result = bisect(groups, good, build, TARGET, budget=30)
    assert culprit_names(groups, result.culprit) == {"pkg1", "pkg6"}
    assert result.confirmed
    assert any("carefully" in note for note in result.notes)   # the quick pass's guess was caught, not reported


def test_a_change_that_must_move_with_another_is_one_group_that_cannot_be_split() -> None:
    good, bad = sides(8)
    changes = lock_diff(good, bad)

    def resolves(pins: Mapping[str, Pin]) -> bool:   # pkg3 at 2.x needs pkg5 at 2.x, as a torch needs its triton
        return not (pins["pkg3"].version.startswith("2.") and pins["pkg5"].version.startswith("1."))

    groups = group_changes(changes, good, resolves)
    assert [g.names for g in groups if len(g.changes) > 1] == [("pkg3", "pkg5")]
    assert len(groups) == 7
    result = bisect(groups, good, FakeBuild([{"pkg3"}]), TARGET, check=resolves)
    assert culprit_names(groups, result.culprit) == {"pkg3", "pkg5"}
    assert result.cannot_split
    assert all(resolves(compose(good, [c for i in s.groups for c in groups[i].changes])) for s in result.steps
               if s.number)   # no step built a set the resolver refuses


def test_a_flaky_step_is_said_and_never_taken_as_bad() -> None:
    groups, good = groups_of(8)
    first_half = frozenset(f"pkg{i}" for i in range(4))

    def flaky(moved: frozenset[str], count: int) -> Outcome | None:  # fails once, passes when run again
        if moved == first_half and count == 1:
            return Outcome(Verdict.FAIL, STAGE, "kernel-image-missing", "a spurious failure")
        return None

    result = bisect(groups, good, FakeBuild([{"pkg5"}], flaky), TARGET, budget=30)
    assert culprit_names(groups, result.culprit) == {"pkg5"}
    assert result.confirmed
    assert any(note.startswith("flaky: groups {1, 2, 3, 4}") for note in result.notes)


def test_a_step_failing_for_another_reason_is_other_and_never_bad() -> None:
    groups, good = groups_of(8)

    def elsewhere(moved: frozenset[str], count: int) -> Outcome | None:  # pkg2 breaks the import stage
        return Outcome(Verdict.FAIL, "import", "missing-module") if "pkg2" in moved and "pkg6" not in moved else None

    result = bisect(groups, good, FakeBuild([{"pkg6"}], elsewhere), TARGET, budget=30)
    assert culprit_names(groups, result.culprit) == {"pkg6"}
    others = [s for s in result.steps if s.outcome.verdict is Verdict.OTHER]
    assert others and all(s.outcome.stage == "import" for s in others)
    assert all("not the failure bisected" in s.outcome.why for s in others)


def test_the_budget_ends_the_search_and_says_so() -> None:
    groups, good = groups_of(16)
    build = FakeBuild([{"pkg3", "pkg12"}])
    result = bisect(groups, good, build, TARGET, budget=3)
    assert result.exhausted and not result.confirmed
    assert result.builds == 3 == len(build.calls)


def test_nothing_to_bisect_when_the_locks_install_the_same() -> None:
    good, _ = sides(3)
    result = bisect([], good, FakeBuild([]), TARGET)
    assert result.culprit is None and result.builds == 0 and result.notes
