"""Failure classification: a stage's reason and log excerpt -> a known failure class and a fix hint.

The catalogue is data (`data/failures.yaml`, with sources); this module loads and validates it and
picks the best match: the pattern with the most literal characters wins (a long, exact signature
beats a generic one), ties go to the entry of the stage that failed, then to the earlier entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError
from ..results import StageResult, Status

CATALOGUE = Path(__file__).resolve().parent.parent / "data" / "failures.yaml"
UNCLASSIFIED = "unclassified"
STAGES = ("build", "image", "probe", "facts", "import", "flavour", "arch-audit", "toolchain", "jit-compile",
          "gpu-visible", "kernel-smoke", "server", "first-generation")
# Stage names used by public reports (and the failure corpus) -> the ladder's names.
STAGE_ALIASES = {"install": "build", "server-start": "server", "first-request": "first-generation"}


class FailureClass(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    stage: str
    title: str
    patterns: tuple[str, ...]
    hint: str = Field(min_length=1)
    sources: tuple[str, ...] = Field(min_length=1)

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, value: str) -> str:
        if value not in STAGES:
            msg = f"unknown stage {value!r}; known: {', '.join(STAGES)}"
            raise ValueError(msg)
        return value

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                msg = f"pattern {pattern!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        return value


class CatalogueFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(alias="schema")
    classes: tuple[FailureClass, ...]


@dataclass(frozen=True)
class Match:
    id: str
    stage: str            # the stage the class belongs to (the ladder's name)
    title: str
    hint: str
    matched: str          # the text that matched, "" when unclassified


@dataclass(frozen=True)
class Catalogue:
    classes: tuple[FailureClass, ...]

    def get(self, class_id: str) -> FailureClass | None:
        return next((c for c in self.classes if c.id == class_id), None)

    def classify(self, text: str, stage: str | None = None) -> Match:
        """The best-matching class for `text`, from a stage named `stage` (ladder or report names)."""
        stage = STAGE_ALIASES.get(stage or "", stage)
        best: tuple[float, bool, int] | None = None
        found: Match | None = None
        for index, entry in enumerate(self.classes):
            for pattern in entry.patterns:
                hit = re.search(pattern, text)
                if hit is None:
                    continue
                key = (literal_weight(pattern), entry.stage == stage, -index)
                if best is None or key > best:
                    best = key
                    found = Match(entry.id, entry.stage, entry.title, entry.hint, hit.group(0)[:300])
        if found is None:
            return Match(UNCLASSIFIED, stage or "", "no known signature matched",
                         "Read the log excerpt; if this failure is worth recognising, add it to "
                         "buildscripts/data/failures.yaml with its source.", "")
        return found


def literal_weight(pattern: str) -> float:
    """How specific a pattern is: its literal characters (escapes count once; classes and quantifiers 0)."""
    weight, i, depth = 0.0, 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            weight += 0 if pattern[i + 1].isalnum() else 1  # \d \s \b \S are not literal; \. is
            i += 2
            continue
        if depth == 0 and pattern.startswith("(?", i):     # (?:  (?!  (?m)  (?<=  ... are syntax
            i += 2
            while i < len(pattern) and pattern[i] in "aiLmsux-:=!<":
                i += 1
            continue
        if depth == 0 and ch == "{":                        # {0,200} is a quantifier
            i = pattern.find("}", i) + 1 or len(pattern)
            continue
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        elif depth == 0 and ch not in "().*+?{}|^$":
            weight += 1
        i += 1
    return weight


@cache
def load(path: Path = CATALOGUE) -> Catalogue:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        msg = f"cannot read the failure catalogue {path}: {exc}"
        raise ConfigError(msg, hint="restore the file from git") from None
    try:
        spec = CatalogueFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = f"{path}: {where}: {first['msg']}"
        raise ConfigError(msg, hint="each class needs id, stage, title, patterns, hint and sources") from None
    ids = [c.id for c in spec.classes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        msg = f"{path}: duplicate class id(s): {', '.join(duplicates)}"
        raise ConfigError(msg, hint="give every class its own id")
    return Catalogue(spec.classes)


def classify(text: str, stage: str | None = None) -> Match:
    return load().classify(text, stage)


def label(result: StageResult) -> StageResult:
    """A failed stage with failure_class and hint filled in (kept when the caller already set them)."""
    if result.status is not Status.FAILED or result.failure_class:
        return result
    text = "\n".join(part for part in (result.reason, result.log_excerpt) if part)
    match = classify(text, result.name)
    return result.model_copy(update={"failure_class": match.id, "hint": match.hint})


def hint_for(class_id: str) -> str | None:
    entry = load().get(class_id)
    return entry.hint if entry else None
