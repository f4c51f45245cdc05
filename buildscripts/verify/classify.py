"""Failure classification: a stage's reason and log excerpt -> a known failure class and a fix hint.

The catalogue is data (`data/failures.yaml`, with sources); this module loads and validates it and
picks the best match. Patterns are short robust signals (exception type, the module or file raising
it, a key phrase, an arch or a version), searched case-insensitively in the log with runs of spaces
and tabs collapsed; a pattern written as a list matches only when all of its signals are found.
Among the classes that match:
1. a class drops out when another matching class `beats` it (the cause beats the wrapper reporting it); a
   generic class beats too: a compiler's error in view rules out a missing arch read from the invalid or
   missing kernel image the failed compile left behind, though the compile error names no fix by itself;
2. a class marked `generic` names no cause and yields to any class that does: an outcome ("the server exited"),
   or a line that only reports a failure below it (sgl_kernel's "Could not load any common_ops library",
   "Capture cuda graph failed", BackendCompilerFailed, a compiler's error). This is where "look one level below
   before naming a cause" is decided: the cause's own words, or what the probe looked up under them (ldd of the
   module, the contents of the CUDA home), name it; a generic class's hint says what was seen and carries the
   error under it;
3. the most specific match wins: the most literal characters in the matching pattern's signals;
   ties go to the class of the stage that failed, then to the earlier class in the file.
The hint is a template (`hints`): what the pattern's named groups captured (the header, the arch, the
package and its versions, the library, the URL) is carried into it.
An unclassified failure carries its decisive log line (`results.decisive`) instead of a cause.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..results import StageResult, Status
from ..results.decisive import EVIDENCE_KEY, decisive_line
from ..results.judge import UNCLASSIFIED as _UNCLASSIFIED
from . import hints

CATALOGUE = Path(__file__).resolve().parent.parent / "data" / "failures.yaml"
STAGES = ("build", "image", "probe", "facts", "import", "flavour", "arch-audit", "toolchain", "jit-compile",
          "gpu-visible", "kernel-smoke", "nccl-allreduce", "server", "first-generation")
# Stage names used by public reports (and the failure corpus) -> the ladder's names.
STAGE_ALIASES = {"install": "build", "server-start": "server", "first-request": "first-generation"}
UNCLASSIFIED = _UNCLASSIFIED          # the class of a failure no entry matches (callers use classify.UNCLASSIFIED)
Pattern = str | tuple[str, ...]       # one signal, or signals that must all be found
_SPACES = re.compile(r"[ \t]+")


class FailureClass(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    stage: str
    title: str
    patterns: tuple[Pattern, ...]
    hint: str = Field(min_length=1)
    sources: tuple[str, ...] = Field(min_length=1)
    beats: tuple[str, ...] = ()       # classes this one explains when both match
    generic: bool = False             # names no cause (an outcome, a wrapper's line): chosen when nothing names one
    captures: dict[str, str] = {}     # {name} in the hint -> the words used when the log did not show it
    extract: tuple[str, ...] = ()     # expressions that only fill {name}s once a pattern matched

    def render(self, captured: Mapping[str, str]) -> str:
        return hints.render(self.hint, captured, self.captures)

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, value: str) -> str:
        if value not in STAGES:
            msg = f"unknown stage {value!r}; known: {', '.join(STAGES)}"
            raise ValueError(msg)
        return value

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[Pattern, ...]) -> tuple[Pattern, ...]:
        for pattern in value:
            if isinstance(pattern, tuple) and not pattern:
                msg = "a list of signals must hold at least one signal"
                raise ValueError(msg)
            for signal in signals(pattern):
                try:
                    re.compile(signal)
                except re.error as exc:
                    msg = f"pattern {signal!r} is not a valid regular expression: {exc}"
                    raise ValueError(msg) from None
        return value

    @field_validator("extract")
    @classmethod
    def _extract_compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for expression in value:
            try:
                if not re.compile(expression).groupindex:
                    msg = f"extract {expression!r} names no group (?P<name>...) to fill"
                    raise ValueError(msg)
            except re.error as exc:
                msg = f"extract {expression!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    @model_validator(mode="after")
    def _hint_fits_the_captures(self) -> FailureClass:
        expressions = [s for p in self.patterns for s in signals(p)] + list(self.extract)
        groups = {name for expression in expressions for name in re.compile(expression).groupindex}
        if found := hints.problems(self.hint, self.captures, groups):
            msg = f"{self.id}: hint: {'; '.join(found)}"
            raise ValueError(msg)
        return self


class CatalogueFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(alias="schema")
    classes: tuple[FailureClass, ...]


@dataclass(frozen=True)
class Match:
    id: str
    stage: str            # the stage the class belongs to (the ladder's name)
    title: str
    hint: str             # with what the log showed filled in
    matched: str          # the text that matched, "" when unclassified
    captured: Mapping[str, str] = field(default_factory=dict)   # {name} -> the text the log showed


@dataclass(frozen=True)
class Catalogue:
    classes: tuple[FailureClass, ...]

    def get(self, class_id: str) -> FailureClass | None:
        return next((c for c in self.classes if c.id == class_id), None)

    def classify(self, text: str, stage: str | None = None) -> Match:
        """The best-matching class for `text`, from a stage named `stage` (ladder or report names)."""
        stage = STAGE_ALIASES.get(stage or "", stage)
        text = normalise(text)
        hits: dict[str, tuple[tuple[float, bool, int], FailureClass, list[re.Match[str]]]] = {}
        for index, entry in enumerate(self.classes):
            for pattern in entry.patterns:
                matched = search(pattern, text)
                if matched is None:
                    continue
                key = (pattern_weight(pattern), entry.stage == stage, -index)
                if entry.id not in hits or key > hits[entry.id][0]:
                    hits[entry.id] = (key, entry, matched)
        # `beats` first, generic classes' too: a compile error in view (generic, it names no cause) still rules
        # out "no kernels for this arch" read from the invalid image that the failed compile left behind.
        beaten = {loser for _, entry, _ in hits.values() for loser in entry.beats}
        standing = {cid: hit for cid, hit in hits.items() if cid not in beaten} or hits
        if any(not entry.generic for _, entry, _ in standing.values()):
            standing = {cid: hit for cid, hit in standing.items() if not hit[1].generic}
        candidates = list(standing.values())
        if not candidates:
            return Match(UNCLASSIFIED, stage or "", "no known signature matched",
                         "Read the decisive line and the log excerpt; if this failure is worth recognising, "
                         "add it to buildscripts/data/failures.yaml with its source.", "")
        _, entry, matched = max(candidates, key=lambda hit: hit[0])
        captured = captures(matched, entry.extract, text)
        return Match(entry.id, entry.stage, entry.title, entry.render(captured),
                     " … ".join(m.group(0) for m in matched)[:300], captured)


def signals(pattern: Pattern) -> tuple[str, ...]:
    return (pattern,) if isinstance(pattern, str) else pattern


@cache
def _compiled(signal: str) -> re.Pattern[str]:
    return re.compile(signal, re.IGNORECASE)


def normalise(text: str) -> str:
    """Runs of spaces and tabs become one space (`nvcc fatal   :` and `nvcc fatal :` read the same)."""
    return _SPACES.sub(" ", text)


def search(pattern: Pattern, text: str) -> list[re.Match[str]] | None:
    """The match of every signal, or None when one is missing."""
    found = []
    for signal in signals(pattern):
        hit = _compiled(signal).search(text)
        if hit is None:
            return None
        found.append(hit)
    return found


def captures(matched: list[re.Match[str]], extract: tuple[str, ...], text: str) -> dict[str, str]:
    """{name: text} from the named groups of the matching signals, then of the class's `extract` expressions."""
    found: dict[str, str] = {}
    hits = list(matched) + [hit for e in extract if (hit := _compiled(e).search(text))]
    for hit in hits:
        for name, value in hit.groupdict().items():
            if value and name not in found:
                found[name] = value
    return found


def pattern_weight(pattern: Pattern) -> float:
    """How specific a pattern is: the literal characters of all its signals."""
    return sum(literal_weight(signal) for signal in signals(pattern))


def literal_weight(pattern: str) -> float:
    """How specific a pattern is: its literal characters (escapes count once; classes and quantifiers 0)."""
    weight, i, depth = 0.0, 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            weight += 0 if pattern[i + 1].isalnum() else 1  # \d \s \b \S are not literal; \. is
            i += 2
            continue
        if depth == 0 and pattern.startswith(("(?P<", "(?P="), i):  # a group's name is not text to find
            i = pattern.find(">" if pattern[i + 3] == "<" else ")", i) + 1 or len(pattern)
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
    unknown = sorted({f"{c.id} beats {b}" for c in spec.classes for b in c.beats if b not in ids or b == c.id})
    if unknown:
        msg = f"{path}: `beats` names no other class: {', '.join(unknown)}"
        raise ConfigError(msg, hint="list ids of other classes in `beats`")
    return Catalogue(spec.classes)


def classify(text: str, stage: str | None = None) -> Match:
    return load().classify(text, stage)


def label(result: StageResult) -> StageResult:
    """A failed stage with failure_class and hint filled in (kept when the caller already set them)."""
    if result.status is not Status.FAILED or result.failure_class:
        return result
    text = "\n".join(part for part in (result.reason, result.log_excerpt) if part)
    match = classify(text, result.name)
    if match.id != UNCLASSIFIED:
        return result.model_copy(update={"failure_class": match.id, "hint": match.hint})
    line = decisive_line(text)  # reports show it next to "unclassified" (results.judge.failure_detail)
    evidence = {**result.evidence, EVIDENCE_KEY: line} if line else result.evidence
    return result.model_copy(update={"failure_class": match.id, "hint": match.hint, "evidence": evidence})


def hint_for(class_id: str) -> str | None:
    """The hint of a class set by the caller, without a log to fill it from (its defaults)."""
    entry = load().get(class_id)
    return entry.render({}) if entry else None
