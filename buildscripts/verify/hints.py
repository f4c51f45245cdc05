"""Fix hints that name the concrete thing a log shows: a failure class's hint is a small template.

- `{name}` is replaced by what a named group `(?P<name>...)` of the matching pattern (or of one of the
  class's `extract` expressions) captured in the log, else by the class's default for `name`
  (`captures:` in the catalogue). A missing header, an arch, a package and its versions, a library,
  a URL reach the hint this way.
- `[[...]]` is an optional part: it is kept only when every `{name}` inside it was captured from the
  log, so a hint never says "needs version {required}" with nothing to put there.

`problems` checks a template against its class when the catalogue loads; `render` fills it in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

FIELD = re.compile(r"\{(\w+)\}")
OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
MAX_VALUE = 120                      # a captured value longer than this is cut (a path, a mangled symbol)
_QUOTES = "'\"`“”‘’"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def fields(template: str) -> tuple[set[str], set[str]]:
    """The placeholders outside optional parts, and those inside them."""
    inside = {name for part in OPTIONAL.findall(template) for name in FIELD.findall(part)}
    outside = set(FIELD.findall(OPTIONAL.sub("", template)))
    return outside, inside


def problems(template: str, defaults: Mapping[str, str], groups: Iterable[str]) -> list[str]:
    """What is wrong with a hint template of a class whose expressions capture `groups` (empty: nothing)."""
    found = []
    parts, rest = OPTIONAL.findall(template), OPTIONAL.sub("", template)
    if "{" in FIELD.sub("", template) or "}" in FIELD.sub("", template):
        found.append("a `{` or `}` that is not a {name} placeholder")
    if "[[" in rest or "]]" in rest or any("[[" in part for part in parts):
        found.append("unbalanced or nested [[...]]")
    if any(not FIELD.search(part) for part in parts):
        found.append("an optional part [[...]] without a {name} in it")
    outside, inside = fields(template)
    groups = set(groups)
    if unknown := sorted((outside | inside) - groups):
        found.append(f"{{{'}, {'.join(unknown)}}} captured by no pattern (name a group (?P<name>...))")
    if unused := sorted(groups - outside - inside):
        found.append(f"captured but not used in the hint: {', '.join(unused)}")
    if undefaulted := sorted(outside - set(defaults)):
        found.append(f"no default under `captures` for {', '.join(undefaulted)} (or put it in [[...]])")
    if stray := sorted(set(defaults) - outside - inside):
        found.append(f"a default under `captures` for a name the hint does not use: {', '.join(stray)}")
    return found


def clean(value: str) -> str:
    """A captured value as a hint shows it: one line, no surrounding quotes, at most MAX_VALUE characters."""
    value = " ".join(_CONTROL.sub(" ", value).split()).strip(_QUOTES + " ")
    return value if len(value) <= MAX_VALUE else value[:MAX_VALUE - 1] + "…"


def render(template: str, captured: Mapping[str, str], defaults: Mapping[str, str]) -> str:
    """The hint for one match: captured values in, optional parts kept only when all of theirs were captured."""
    values = {name: clean(value) for name, value in captured.items() if value and clean(value)}

    def optional(part: re.Match[str]) -> str:
        names = FIELD.findall(part.group(1))
        return FIELD.sub(lambda m: values[m.group(1)], part.group(1)) if all(n in values for n in names) else ""

    text = OPTIONAL.sub(optional, template)
    text = FIELD.sub(lambda m: values.get(m.group(1), defaults.get(m.group(1), "")), text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()
