"""Tag templates in matrix.yaml (`tags:`): which fields they may use, and every problem with them.

Checked when matrix.yaml is loaded (the schema calls `template_problems`), so a typo in a template
fails before anything is built; `publish.tags` renders them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from ..refs import COMPONENT

# The keys of cells.Cell.axes() (a unit test keeps the two in step).
AXIS_FIELDS = ("cell", "base", "python", "torch", "cuda", "lane", "sglang", "toolkit", "archs")
CANDIDATE_FIELDS = (*AXIS_FIELDS, "inputs")
GOOD_FIELDS = (*AXIS_FIELDS, "arch")

REPOSITORY_RE = re.compile(rf"{COMPONENT}(?:/{COMPONENT})*")


def template_problems(candidate: str, good: Iterable[str], repository: str) -> list[str]:
    """Every problem with the tag templates, as sentences naming the template and the known fields."""
    problems = [_problem(candidate, "tags.candidate", CANDIDATE_FIELDS)]
    problems += [_problem(t, f"tags.good[{i}]", GOOD_FIELDS) for i, t in enumerate(good)]
    if not REPOSITORY_RE.fullmatch(repository):  # `match` with `$` let "name\n" through
        problems.append(f"tags.repository {repository!r} is not a valid repository name "
                        "(lowercase letters, digits, '.', '_', '-', '/')")
    return [p for p in problems if p]


def _problem(template: str, where: str, known: tuple[str, ...]) -> str:
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return f"{where} {template!r} is not a valid template: {exc}"
    unknown = [f for f in fields if f not in known]
    if unknown:
        return (f"{where} {template!r} uses unknown field(s) {', '.join(map(repr, unknown))}; "
                f"known fields: {', '.join(known)}")
    if not fields:
        return f"{where} {template!r} has no field: every cell would get the same tag"
    return ""
