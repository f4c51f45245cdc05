"""The one rule for the stage results that come from inside an image (a container, host mode, an LXC container,
a probe's output file): the host owns the record's shape. It asked for some stages in an order; it keeps exactly
one result per stage asked for, the first that comes when that stage is the next one due, each parsed once.
Every other result line is refused and noted (never recorded as a stage): a second one for a stage (a forged
"passed" printed before or after the probe's own), one for a stage that is not due yet (out of the order asked),
one for a stage the host did not ask for. The code under test prints on the same stream as the probe, so what
it prints is a claim either way; this rule only keeps it from adding entries, or reordering them, or making a
stage count twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REFUSED = "refused_lines"   # the key of an entry's evidence where the host notes the lines it refused
MAX_NOTES = 20              # notes kept per run; the rest are counted
NAME_CHARS = 60


def shown(value: object) -> str:
    """A name or status the code under test wrote, as a note may quote it: short, printable."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text[:NAME_CHARS] + ("…" if len(text) > NAME_CHARS else ""))


@dataclass
class StageLines:
    """The results accepted so far (one per planned stage, in order) and the notes on those refused, each note
    kept with the entry it belongs after: the last stage accepted when it came (the first planned before any)."""

    planned: tuple[str, ...]
    accepted: list[dict[str, Any]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    more: int = 0

    @property
    def due(self) -> str | None:
        """The stage whose result comes next, or None when every planned stage has one."""
        return self.planned[len(self.accepted)] if len(self.accepted) < len(self.planned) else None

    def offer(self, raw: Mapping[str, Any]) -> bool:
        """True when `raw` is the result of the stage due (it is kept); else it is refused and noted."""
        name, due = raw.get("name"), self.due
        if name == due:
            self.accepted.append(dict(raw))
            return True
        done = self.planned[:len(self.accepted)]
        said = f"a result line for {shown(name)} ({shown(raw.get('status'))})"
        if name in done:
            why = f"{said}, a second one for that stage: refused, the stage counts by its first"
        elif name in self.planned:
            why = f"{said} while {due} was due, out of the order asked: refused"
        else:
            why = f"{said}, a stage the host did not ask for: refused"
        after = self.accepted[-1]["name"] if self.accepted else (self.planned[0] if self.planned else "")
        if len(self.notes) < MAX_NOTES:
            self.notes.append((after, why + (f" (printed after {after})" if self.accepted else "")))
        else:
            self.more += 1
        return False

    def notes_for(self, entries: Sequence[str]) -> dict[str, list[str]]:
        """The notes by the entry they go with, among `entries` (a note whose stage has no entry goes with the
        first): every refused line is said somewhere in the record."""
        found: dict[str, list[str]] = {}
        for after, text in self.notes:
            found.setdefault(after if after in entries else (entries[0] if entries else ""), []).append(text)
        if self.more and found:
            last = self.notes[-1][0] if self.notes[-1][0] in entries else (entries[0] if entries else "")
            found[last].append(f"and {self.more} more result line(s) refused")
        return found
