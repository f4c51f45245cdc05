"""Tag templates in matrix.yaml (`tags:`): which fields they may use, and every problem with them.

Checked when matrix.yaml is loaded (the schema calls `template_problems`), so a typo in a template
fails before anything is built; rendered here for `publish.tags` (which applies them) and the reports (which
name the tag a user pulls).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from ..errors import ConfigError
from ..refs import COMPONENT


class Tags(Protocol):
    """matrix.yaml's `tags:` (schema.Tags), as rendering reads it."""

    @property
    def candidate(self) -> str: ...
    @property
    def good(self) -> tuple[str, ...]: ...
    @property
    def repository(self) -> str: ...

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


TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")




def check_templates(cfg: Tags) -> None:
    """Raise ConfigError when a template names an unknown field (run at matrix load and before tagging)."""
    problems = template_problems(cfg.candidate, cfg.good, cfg.repository)
    if problems:
        raise ConfigError("; ".join(problems), hint="fix the `tags:` section of matrix.yaml")


def render(template: str, fields: Mapping[str, str]) -> str:
    """One tag from a template; characters a docker tag cannot hold become '-'."""
    try:
        raw = template.format_map(dict(fields))
    except (KeyError, ValueError, IndexError) as exc:
        known = ", ".join(fields)
        msg = f"tag template {template!r} cannot be rendered ({exc}); known fields: {known}"
        raise ConfigError(msg, hint="fix the `tags:` section of matrix.yaml") from None
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).lstrip(".-")[:128]
    if not TAG_RE.match(tag):
        msg = f"tag template {template!r} renders to {raw!r}, which is not a valid docker tag"
        raise ConfigError(msg, hint="use fields that give letters, digits, '.', '_' or '-'")
    return tag


def named(cfg: Tags, axes: Mapping[str, str], archs: Sequence[str], *, every_arch: bool) -> list[str]:
    """`repository:tag` of each good tag template, in their order, each once: one per arch of `archs` (as tags
    spell them, `sm90`) for a template with `{arch}`; for one without, its tag when `every_arch`."""
    check_templates(cfg)
    refs: list[str] = []
    for template in cfg.good:
        for arch in archs if "{arch}" in template else ([""] if every_arch else []):
            ref = f"{cfg.repository}:{render(template, {**axes, 'arch': arch})}"
            if ref not in refs:
                refs.append(ref)
    return refs
