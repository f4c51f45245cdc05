"""Changes that must move together: a step installs a set of packages the resolver accepts, or none at all.

A change is tried alone on the good set; one the resolver refuses alone (a new torch that needs its new triton)
is tried with each other change in turn (those refused alone first) and joins the first it resolves with; one
that resolves with no single partner joins every other change that cannot stand alone, in one group that cannot be
split. Changes of hashes only move no version and are never asked about. `UvCheck` asks the resolver `nox -s lock`
uses (`uv pip compile`, for the lock's Python and platform, from the lock's index), with every package pinned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..errors import PackageIndexError
from ..lock.lockfile import Pin, parse_pins
from ..lock.resolver import Target, compile_requirements
from .diff import Change, Kind, compose

HOST_INDEX = "(the host's pip index)"


class ResolverCheck(Protocol):
    """Does this whole set of pins resolve (every requirement of every package met, nothing else needed)?"""

    def __call__(self, pins: Mapping[str, Pin]) -> bool: ...


@dataclass(frozen=True)
class Group:
    changes: tuple[Change, ...]
    why: str = ""                  # why these move together ("" for a change alone)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.changes)

    def line(self) -> str:
        return ", ".join(c.line().split(" ", 1)[1] for c in self.changes) + (f"  ({self.why})" if self.why else "")


@dataclass
class UvCheck:
    """The lock step's resolver: every package of the set pinned, for the lock's interpreter and platform."""

    target: Target
    index: str | None                              # the lane's own index, None for the host's
    env: Mapping[str, str]
    logs: Path | None = None
    asked: list[float] = field(default_factory=list)   # seconds of each question, for the plan's line

    def __call__(self, pins: Mapping[str, Pin]) -> bool:
        env = dict(self.env)
        if self.index:   # as the lock step does for a lane with its own index
            env = {**env, "UV_DEFAULT_INDEX": self.index, "UV_INDEX": ""}
        log = self.logs / f"resolve-{len(self.asked) + 1}.log" if self.logs else None
        done = compile_requirements([f"{n}=={p.version}" for n, p in sorted(pins.items())], self.target, env=env,
                                    log=log)
        self.asked.append(done.seconds)
        if done.network_failure:
            msg = f"the package index cannot be reached to check a step: {done.error}"
            raise PackageIndexError(msg, hint="check the index settings (PIP_*, UV_*) and the network, then run "
                                              "the bisection again")
        # A set that needs a package it lacks resolves only because uv adds it: the step installs with
        # `--no-deps` and would go without it (a removal whose dependant stays), so it is refused.
        return done.ok and not set(parse_pins(done.body)) - set(pins)

    @classmethod
    def from_header(cls, python: str | None, platform: str | None, index: str | None, env: Mapping[str, str],
                    logs: Path | None = None) -> UvCheck | None:
        """From a lock's header fields; None when they are missing (a lock made by hand: not checked)."""
        if not python or not platform:
            return None
        return cls(Target(python, platform), None if index in (None, HOST_INDEX) else index, env, logs)


def group_changes(changes: Sequence[Change], good: Mapping[str, Pin], check: ResolverCheck | None) -> list[Group]:
    """The groups a bisection moves, in the order of the diff; each change alone when there is no check."""
    moving = [c for c in changes if c.kind is not Kind.HASH]
    if check is None:
        return [Group((c,)) for c in changes]
    alone = {c.name for c in moving if check(compose(good, [c]))}
    stuck = [c for c in moving if c.name not in alone]
    partner: dict[str, str] = {}
    for change in stuck:
        if change.name in partner:
            continue
        # the others that cannot stand alone first: a new torch and its new triton are each refused alone
        others = [o for o in stuck if o is not change] + [o for o in moving if o.name in alone]
        mate = next((o for o in others if o.name not in partner and check(compose(good, [change, o]))), None)
        if mate is not None:
            partner[change.name], partner[mate.name] = mate.name, change.name
    loose = [c for c in stuck if c.name not in partner]
    groups: list[Group] = []
    placed: set[str] = set()
    for change in changes:
        if change.name in placed:
            continue
        if change.name in partner:
            mate = next(c for c in changes if c.name == partner[change.name])
            groups.append(Group((change, mate), f"{change.name} resolves only with {mate.name}"))
            placed |= {change.name, mate.name}
        elif change in loose:
            groups.append(Group(tuple(loose), "none of these resolves alone or with one other change"))
            placed |= {c.name for c in loose}
        else:
            groups.append(Group((change,)))
            placed.add(change.name)
    return groups
