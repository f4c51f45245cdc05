"""The lock diff: one Change per package that a bad lock adds, removes, or pins at another version or hashes.

A cell installs its layer locks one over the other (lane, SGLang, toolkit: `drift.overlay`), so the diff is of
what the cell installs, not of one file: a package the toolkit layer moves counts once, as the toolkit has it.
Entries are the lock reader's (`lockfile.parse_pins`: name, version, hashes). `uv pip compile` resolves for one
Python and one platform, so the lock bodies carry no environment markers and neither does a Change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from ..lock.lockfile import Pin


class Kind(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    VERSION = "version"
    HASH = "hash-only"        # the same version with other files (a re-upload, a new wheel for another platform)


MARKS = {Kind.ADDED: "+", Kind.REMOVED: "-", Kind.VERSION: "~", Kind.HASH: "#"}


@dataclass(frozen=True, order=True)
class Change:
    name: str
    kind: Kind
    good: Pin | None          # None when the bad lock adds the package
    bad: Pin | None           # None when the bad lock removes it

    def line(self) -> str:
        """One line for people: `~ triton 3.5.0 -> 3.5.1`."""
        old = self.good.version if self.good else ""
        new = self.bad.version if self.bad else ""
        what = {Kind.ADDED: new, Kind.REMOVED: old, Kind.VERSION: f"{old} -> {new}",
                Kind.HASH: f"{old} (other hashes: {_hash_delta(self.good, self.bad)})"}[self.kind]
        return f"{MARKS[self.kind]} {self.name} {what}"

    def requirement(self) -> str | None:
        """The pin the bad side asks for (`name==version`), None for a removal."""
        return f"{self.name}=={self.bad.version}" if self.bad else None


def _hash_delta(good: Pin | None, bad: Pin | None) -> str:
    before, after = set(good.hashes if good else ()), set(bad.hashes if bad else ())
    return f"{len(after - before)} new, {len(before - after)} gone"


def lock_diff(good: Mapping[str, Pin], bad: Mapping[str, Pin]) -> list[Change]:
    """Every package whose pin differs between the two installed sets, sorted by name."""
    changes = []
    for name in sorted(good.keys() | bad.keys()):
        old, new = good.get(name), bad.get(name)
        if old == new:
            continue
        if old is None:
            kind = Kind.ADDED
        elif new is None:
            kind = Kind.REMOVED
        elif old.version != new.version:
            kind = Kind.VERSION
        else:
            kind = Kind.HASH
        changes.append(Change(name, kind, old, new))
    return changes


def compose(good: Mapping[str, Pin], changes: Iterable[Change]) -> dict[str, Pin]:
    """The good set with `changes` applied: what a step installs."""
    pins = dict(good)
    for change in changes:
        if change.bad is None:
            pins.pop(change.name, None)
        else:
            pins[change.name] = change.bad
    return pins
