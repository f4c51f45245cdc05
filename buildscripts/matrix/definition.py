"""A cell's definition: everything matrix.yaml says about one cell, and the rules that judge it, as one digest.

A sealed record counts for its cell while the cell's definition is what it was when the record was made: adding
or editing another cell, lane or platform leaves it valid (the whole file's digest is kept in the record as
provenance only). The definition holds the cell's base and platform, its torch lane (with its CUDA flavour's
version and index), its SGLang release and pin, its toolkit recipe (of the lane's flavour alone, as the image's
inputs take it), its targets and also-audited archs, the server profiles it is verified and warmed with, its
declared expected failure or exclusion, the tag templates that name it, and the version of the judging rules
(`results.judge.RULES`). `cells.definition` builds it when matrix.yaml is expanded (every Cell carries its own);
this module says what changed and whether a record is stale. The record keeps the definition itself beside its
digest, so that a stale record can say what changed ("targets gained sm_103a").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..results import CellResult, ExpectedFailure
from ..results import definition_digest as digest
from ..results.provenance import short


class Defined(Protocol):
    """What `stale` needs of a matrix cell (cells.Cell): its definition, and the definition's digest."""

    @property
    def definition(self) -> Mapping[str, Any]: ...

    @property
    def definition_digest(self) -> str: ...



__all__ = ["PARTS", "Defined", "changes", "digest", "expectation", "stale"]


def expectation(expected: ExpectedFailure | None) -> dict[str, Any] | None:
    """A declared expected failure as the definition holds it (and a record made before definitions, from what it
    recorded): the stages, the class when given, the reason; not the glob that matched it."""
    if expected is None:
        return None
    found = {"stages": list(expected.stages), "class": expected.failure_class, "reason": expected.reason}
    return {k: v for k, v in found.items() if v is not None}


# How each part is named when it changed (the order in which changes are said)
PARTS = {"targets": "targets", "also_audit": "also-audited archs", "platform": "platform", "base": "base",
         "lane": "torch lane", "sglang": "SGLang release", "toolkit": "toolkit recipe", "profiles": "server profiles",
         "expected": "expected failure", "excluded": "exclusion", "opt_in": "opt-in", "tags": "tag templates",
         "rules": "judging rules"}


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs from `old` to `new`, one phrase per part: 'targets gained sm_103a', 'toolkit recipe changed
    (apt)', 'judging rules 1 -> 2'. Empty when nothing does."""
    said = []
    for key in [*PARTS, *sorted((set(old) | set(new)) - set(PARTS))]:
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        name = PARTS.get(key, key)
        if isinstance(before, list) and isinstance(after, list):
            olds, news = {str(b) for b in before}, {str(a) for a in after}   # sets: a record's list may be long
            gained = [str(a) for a in after if str(a) not in olds]
            lost = [str(b) for b in before if str(b) not in news]
            parts = [f"{verb} {_few(names)}" for verb, names in (("gained", gained), ("lost", lost)) if names]
            said.append(f"{name} {' and '.join(parts) or 'reordered'}")
        elif isinstance(before, dict) and isinstance(after, dict):
            keys = sorted(str(k) for k in set(before) | set(after) if before.get(k) != after.get(k))
            said.append(f"{name} changed ({_few(keys)})")
        elif before is None or after is None:
            said.append(f"{name} {'added' if before is None else 'removed'}")
        else:
            said.append(f"{name} {_few([str(before)])} -> {_few([str(after)])}")
    return said


def _few(names: list[str], most: int = 8, width: int = 80) -> str:
    """Names for a message, at most `most` of them, each at most `width` characters (a record is input too)."""
    shown = [n if len(n) <= width else n[:width] + "…" for n in names[:most]]
    return ", ".join(shown) + (f" and {len(names) - most} more" if len(names) > most else "")


def stale(record: CellResult, cell: Defined, matrix_digest: str, file_digest: str | None = None) -> str | None:
    """Why `record` no longer counts for `cell` (its cell's definition changed since it was judged), None while it
    does. A record made before definitions were recorded counts while the whole matrix.yaml it was judged with
    (`matrix_digest` is today's; `file_digest` is its file's, for a record that sealed none) is today's; else what
    it does record of its cell (targets, expected failure) is compared, and what it does not is said plainly."""
    if record.definition_digest is not None:
        if record.definition_digest == cell.definition_digest:
            return None
        said = changes(record.definition or {}, cell.definition) or ["its definition was written differently"]
        return f"its cell's definition changed since it was judged: {'; '.join(said)}"
    found = record.matrix_digest if record.seal is not None else (record.matrix_digest or file_digest)
    if found == matrix_digest:
        return None
    made = (f"judged with another matrix.yaml (digest {short(found)}, today {short(matrix_digest)})" if found
            else "judged before matrix digests were recorded")
    known = changes({"targets": record.targets, "expected": expectation(record.expected)},
                    {"targets": cell.definition.get("targets"), "expected": cell.definition.get("expected")})
    return (f"{made}, before records named their cell's definition: "
            + (f"{'; '.join(known)}" if known else "its targets and expected failure are today's, but its toolkit "
               "recipe, profiles and tag templates were not recorded") + "; verify it again")
