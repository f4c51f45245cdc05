"""The search: the smallest set of groups that turns the good set from pass to fail, within a budget of builds.

Zeller's delta debugging, isolating form: with `base` passing and `base + C` failing, split C in halves; a half
that fails alone is searched on its own; when neither does, the failure needs parts of both (two changes that
only fail together), and each half is searched with the other applied. Two passes:
1. quick: a half that passes lets the other be taken as failing without a build, and the one culprit found is
   built once more at the end (its confirmation). One culprit among n changes costs log2(n) + 1 builds.
2. careful, when that confirmation disagrees: nothing taken without a build, and every failure run twice before
   it counts; a step whose two runs differ is flaky, said, and never taken as bad.
A step that fails at another stage or with another class than the bad record is OTHER: said, never bad. A step
the resolver refuses is not built. A step that could not run at all (ERROR) is tried once more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from ..lock.lockfile import Pin
from .diff import compose
from .groups import Group, ResolverCheck


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"          # failed at the bad record's stage (and class, when it has one)
    OTHER = "other"        # failed for another reason: said, never taken as bad
    ERROR = "error"        # the step could not run (build tooling, engine): tried once more, never bad


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    stage: str | None = None
    failure_class: str | None = None
    why: str = ""
    lines: tuple[str, ...] = ()          # the decisive lines of the failing stage

    def line(self) -> str:
        where = f" at {self.stage}" if self.stage else ""
        cls = f" ({self.failure_class})" if self.failure_class else ""
        return f"{self.verdict.value}{where}{cls}" + (f": {self.why}" if self.why else "")


@dataclass(frozen=True)
class Target:
    """What "bad" means: the bad record's failed stage, and its class when known."""

    stage: str
    failure_class: str | None = None

    def judge(self, outcome: Outcome) -> Outcome:
        if outcome.verdict is not Verdict.FAIL:
            return outcome
        if outcome.stage == self.stage and self.failure_class in (None, outcome.failure_class):
            return outcome
        wanted = self.stage + (f" ({self.failure_class})" if self.failure_class else "")
        return replace(outcome, verdict=Verdict.OTHER, why=f"not the failure bisected ({wanted}) {outcome.why}".strip())


class Build(Protocol):
    """Build the cell with these pins and run the ladder up to the target's stage, nothing past it."""

    def __call__(self, pins: Mapping[str, Pin], label: str) -> Outcome: ...


@dataclass(frozen=True)
class Step:
    number: int                   # 0 for a step the resolver refused (no build)
    groups: tuple[int, ...]       # indexes into the plan's groups
    outcome: Outcome
    note: str = ""                # "again" (a second run), "confirmation", "not built: ..."


@dataclass
class Result:
    groups: list[Group]
    budget: int
    culprit: tuple[int, ...] | None = None
    confirmed: bool = False
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # flaky steps, other failures, why a pass was dropped
    exhausted: bool = False
    failure: Outcome | None = None                     # the culprit's failing outcome (decisive lines)

    @property
    def builds(self) -> int:
        return sum(1 for s in self.steps if s.number)

    @property
    def cannot_split(self) -> bool:
        """One group of changes that must move together (the resolver accepts none of them alone)."""
        return self.culprit is not None and len(self.culprit) == 1 and len(self.groups[self.culprit[0]].changes) > 1


def default_budget(groups: int) -> int:
    """log2 + 1 for one culprit; room for the careful pass and for two culprits that only fail together."""
    return 4 * math.ceil(math.log2(max(groups, 2))) + 4


class OutOfBudget(Exception):
    pass


class _Search:
    def __init__(self, groups: Sequence[Group], good: Mapping[str, Pin], build: Build, check: ResolverCheck | None,
                 target: Target, result: Result) -> None:
        self.groups, self.good, self.build, self.check, self.target = groups, good, build, check, target
        self.result = result
        self.seen: dict[frozenset[int], list[Outcome]] = {}
        self.strict = False

    def pins(self, subset: frozenset[int]) -> dict[str, Pin]:
        return compose(self.good, [c for i in sorted(subset) for c in self.groups[i].changes])

    def run(self, subset: frozenset[int], note: str = "") -> Outcome:
        if self.result.builds >= self.result.budget:
            raise OutOfBudget
        number = self.result.builds + 1
        groups = tuple(sorted(subset))
        outcome = self.target.judge(self.build(self.pins(subset), f"step {number}"))
        self.result.steps.append(Step(number, groups, outcome, note))
        self.seen.setdefault(subset, []).append(outcome)
        return outcome

    def bad(self, subset: frozenset[int], *, fresh: bool = False) -> bool:
        """Is good + subset bad? Asked of the resolver first; then built, once or (careful pass) twice."""
        if self.check is not None and subset not in self.seen and not self.check(self.pins(subset)):
            refused = Outcome(Verdict.OTHER, "resolve", "unresolvable", "the resolver refuses this set")
            self.result.steps.append(Step(0, tuple(sorted(subset)), refused, "not built"))
            self.seen[subset] = [refused]
        runs = self.seen.get(subset, [])
        if fresh or not runs:
            runs = [*runs, self.run(subset, "confirmation" if fresh else "")]
        if runs[-1].verdict is Verdict.ERROR and len(runs) == 1:
            runs = [*runs, self.run(subset, "again")]
        if self.strict and runs[-1].verdict is Verdict.FAIL and len(runs) == 1:
            runs = [*runs, self.run(subset, "again")]
        verdicts = {r.verdict for r in runs}
        if len(verdicts) > 1 and Verdict.FAIL in verdicts:
            shown = ", ".join(sorted(v.value for v in verdicts))
            self.note(f"flaky: groups {_shown(subset)} gave {shown} on two runs; not taken as bad")
            return False
        return runs[-1].verdict is Verdict.FAIL

    def passed(self, subset: frozenset[int]) -> bool:
        return any(r.verdict is Verdict.PASS for r in self.seen.get(subset, []))

    def note(self, text: str) -> None:
        if text not in self.result.notes:
            self.result.notes.append(text)

    def isolate(self, base: frozenset[int], changes: Sequence[int], *, infer: bool) -> frozenset[int]:
        if len(changes) == 1:
            return frozenset(changes)
        half = len(changes) // 2
        first, second = changes[:half], changes[half:]
        if self.bad(base | frozenset(first)):
            return self.isolate(base, first, infer=infer)
        if infer and self.passed(base | frozenset(first)):
            return self.isolate(base, second, infer=infer)   # taken as failing: the confirmation checks it
        if self.bad(base | frozenset(second)):
            return self.isolate(base, second, infer=infer)
        found = self.isolate(base | frozenset(second), first, infer=infer)
        return found | self.isolate(base | found, second, infer=infer)


def bisect(groups: Sequence[Group], good: Mapping[str, Pin], build: Build, target: Target, *,
           check: ResolverCheck | None = None, budget: int | None = None) -> Result:
    """The smallest failing set of groups, with every step; the good set passes and all groups fail (the
    records say so), and neither end is built again."""
    result = Result(list(groups), budget if budget is not None else default_budget(len(groups)))
    if not groups:
        result.notes.append("the two locks install the same packages: nothing to bisect")
        return result
    search = _Search(groups, good, build, check, target, result)
    everything = list(range(len(groups)))
    try:
        for careful in (False, True):
            search.strict = careful
            found = search.isolate(frozenset(), everything, infer=not careful)
            if search.bad(found, fresh=not careful):
                result.culprit, result.confirmed = tuple(sorted(found)), True
                result.failure = next(r for r in reversed(search.seen[found]) if r.verdict is Verdict.FAIL)
                break
            search.note(f"groups {_shown(found)} did not fail when built again: searching again, carefully "
                        "(nothing taken without a build, every failure run twice)")
            result.culprit = tuple(sorted(found))
    except OutOfBudget:
        result.exhausted = True
        result.notes.append(f"the budget of {result.budget} builds ran out before a culprit was confirmed")
    return result


def _shown(subset: frozenset[int]) -> str:
    return "{" + ", ".join(str(i + 1) for i in sorted(subset)) + "}"
