"""The plan of a bisection, before any build: the diff of the two sides, the groups, the budget, as lines."""

from __future__ import annotations

from dataclasses import dataclass

from .diff import Change, lock_diff
from .groups import Group, ResolverCheck, group_changes
from .search import default_budget
from .sources import Side


@dataclass(frozen=True)
class Plan:
    good: Side
    bad: Side
    changes: tuple[Change, ...]
    groups: tuple[Group, ...]
    budget: int
    checked: str                   # how the groups were decided, for people

    def lines(self) -> list[str]:
        head = [f"good: {', '.join(self.good.where)}", f"bad:  {', '.join(self.bad.where)}"]
        if not self.changes:
            return [*head, "the two sides install the same packages: nothing to bisect"]
        diff = [f"{len(self.changes)} change(s):", *(f"  {c.line()}" for c in self.changes)]
        groups = [f"{len(self.groups)} group(s) ({self.checked}):",
                  *(f"  {i + 1}. {g.line()}" for i, g in enumerate(self.groups))]
        return [*head, *diff, *groups, f"budget: {self.budget} builds (one culprit: about "
                                       f"{max(1, (len(self.groups) - 1).bit_length()) + 1})"]


def make_plan(good: Side, bad: Side, check: ResolverCheck | None, *, checked: str, budget: int | None) -> Plan:
    changes = lock_diff(good.pins, bad.pins)
    groups = group_changes(changes, good.pins, check) if changes else []
    return Plan(good, bad, tuple(changes), tuple(groups), budget or default_budget(len(groups)), checked)
