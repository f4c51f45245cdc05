"""The locks a step builds: the good side's layer locks with a subset of the changes moved in, layer by layer.

A package can sit in more than one layer (the SGLang lock holds the lane's packages too, resolved against them):
a moved package takes, in each layer, the bad side's entry of that layer, and leaves a layer whose bad lock no
longer has it. Entries are moved whole, as `uv pip compile` wrote them (pin, hashes, `# via` lines), the body kept
in uv's order (by name), and each lock's header keeps its fields with the constraints hash of the layer below
chained again, so the composed locks read as `nox -s lock` would have written them. What the layers install
together is exactly `diff.compose(good, changes)` (tests/unit/test_bisect_compose.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..errors import BisectError
from ..lock.lockfile import PIN_LINE, Lockfile, normalize, sha256
from .diff import Change
from .sources import Side


def entries(body: str) -> tuple[str, dict[str, str]]:
    """The text before the first requirement, and each requirement's whole entry by normalised name."""
    head: list[str] = []
    found: dict[str, list[str]] = {}
    name: str | None = None
    for line in body.splitlines(keepends=True):
        match = PIN_LINE.match(line)
        if match:
            name = normalize(match[1])
            found[name] = []
        if name is None:
            head.append(line)
        else:
            found[name].append(line)
    return "".join(head), {n: "".join(lines) for n, lines in found.items()}


def composed_locks(good: Side, bad: Side, changes: Iterable[Change]) -> tuple[Lockfile, ...]:
    """The good side's locks with `changes` moved in from the bad side's locks of the same layers."""
    if len(good.locks) != len(bad.locks):
        msg = (f"the good side has {len(good.locks)} layer lock(s) and the bad side {len(bad.locks)}: a step cannot "
               "take a package from the bad side's layer into the good side's")
        raise BisectError(msg, hint="compare two sides of the same cell (the same layers)")
    moved = {c.name for c in changes}
    made: list[Lockfile] = []
    for old, new in zip(good.locks, bad.locks, strict=True):
        head, kept = entries(old.body)
        _, theirs = entries(new.body)
        for name in moved:
            if name in theirs:
                kept[name] = theirs[name]
            else:
                kept.pop(name, None)
        body = head + "".join(kept[n] for n in sorted(kept))
        header = dict(old.header)
        if made and "constraints-sha256" in header:
            header["constraints-sha256"] = sha256(made[-1].body)
        header["content-sha256"] = sha256(body)
        made.append(replace(old, header=header, body=body))
    return tuple(made)
