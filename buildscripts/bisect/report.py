"""What a bisection hands back: the culprit, the good and bad records, the decisive lines of the failing stage,
the command that reproduces it, and a draft of the upstream issue (Markdown, rendered from the result alone)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..results import LADDER
from .diff import Change
from .records import Seen, decisive_lines
from .search import Result, Target
from .sources import Side

BUILD = "build"       # a target stage before the ladder: the image itself does not build


@dataclass(frozen=True, kw_only=True)
class Handback:
    cell: str
    good: Side
    bad: Side
    target: Target
    result: Result
    good_record: Seen | None = None
    bad_record: Seen | None = None


def stages_upto(stage: str) -> tuple[str, ...]:
    """The ladder up to `stage` and nothing past it (none for a build failure)."""
    return () if stage == BUILD else LADDER[: LADDER.index(stage) + 1]


def culprit_changes(result: Result) -> list[Change]:
    return [c for i in result.culprit or () for c in result.groups[i].changes]


def lines_of(h: Handback) -> tuple[str, ...]:
    """The decisive lines: of the culprit's failing step when it gave any, else of the bad record."""
    if h.result.failure is not None and h.result.failure.lines:
        return h.result.failure.lines
    return decisive_lines(h.bad_record.failed()) if h.bad_record else ()


def reproduce(h: Handback) -> str:
    """Shell lines: the good lock with the culprit's pins on top, built and verified up to the stage."""
    moved = culprit_changes(h.result)
    installs = [c.requirement() for c in moved if c.requirement()]
    removes = [c.name for c in moved if c.bad is None]
    lines = [f"# the cell {h.cell} from the good locks ({h.good.ref}), then the culprit's pins on top:"]
    if installs:
        lines.append("pip install --no-deps " + " ".join(shlex.quote(r) for r in installs if r))
    if removes:
        lines.append("pip uninstall -y " + " ".join(shlex.quote(n) for n in removes))
    stages = stages_upto(h.target.stage)
    if stages:
        lines.append(f"nox -s verify -- IMAGE --stages {','.join(stages)}")
    chosen = ["--class", h.target.failure_class] if h.target.failure_class else []
    again = shlex.join(["nox", "-s", "bisect", "--", h.cell, "--good", h.good.ref, "--bad", h.bad.ref,
                        "--stage", h.target.stage, *chosen])
    lines.append(f"# the whole bisection again: {again}")
    return "\n".join(lines)


def markdown(h: Handback) -> str:
    r = h.result
    out = [f"# Bisection of {h.cell}: {h.good.ref} (good) .. {h.bad.ref} (bad)", "",
           f"Bisected: failure at `{h.target.stage}`" + (f" ({h.target.failure_class})" if h.target.failure_class
                                                           else "") + ".", ""]
    out += ["## Culprit", "", *_culprit(r), ""]
    out += ["## Records", "", f"- good: {h.good_record.line() if h.good_record else h.good.ref + ' (no record given)'}",
            f"- bad: {h.bad_record.line() if h.bad_record else h.bad.ref + ' (no record given)'}", ""]
    decisive = lines_of(h)
    if decisive:
        out += ["## Decisive lines", "", "```", *decisive, "```", ""]
    out += ["## Reproduce", "", "```sh", reproduce(h), "```", ""]
    out += ["## Steps", "", "| # | groups | outcome | note |", "| ---: | --- | --- | --- |"]
    out += [f"| {s.number or '-'} | {', '.join(str(i + 1) for i in s.groups)} | {_cell(s.outcome.line())} | "
            f"{s.note} |" for s in r.steps]
    out += ["", *(f"- {note}" for note in r.notes)]
    out += ["", "## Draft of the upstream issue", "", issue_draft(h)]
    return "\n".join(out).rstrip() + "\n"


def _culprit(r: Result) -> list[str]:
    if r.culprit is None:
        return [f"none named ({r.builds} of {r.budget} builds used)."]
    state = "confirmed" if r.confirmed else "NOT confirmed (the search ran out or the steps disagree)"
    said = [f"- {c.line()}" for c in culprit_changes(r)]
    if r.cannot_split:
        said.append(f"- one set that cannot be split: {r.groups[r.culprit[0]].why}")
    elif len(r.culprit) > 1:
        said.append(f"- {len(r.culprit)} groups that fail only together")
    return [*said, "", f"{state}; {r.builds} of {r.budget} builds used."]


def issue_draft(h: Handback) -> str:
    moved = culprit_changes(h.result)
    versions = ", ".join(f"{k} {v}" for k, v in sorted(h.good.versions().items()))
    named = [c.line().lstrip("~+-# ") for c in moved]
    title = " + ".join(named) or "(no culprit named)"
    where = h.bad_record.where() if h.bad_record else "(where the bad record was made)"
    decisive = lines_of(h)
    parts = [f"### {title} breaks `{h.target.stage}`", "",
             "**Versions.** " + (versions or "(see the locks)") + ".", "",
             f"**What broke.** With every other package as before, {', '.join(named) or 'the change'} makes the "
             f"`{h.target.stage}` check fail" + (f" ({h.target.failure_class})" if h.target.failure_class else "")
             + ":", "",
             "```", *(decisive or ("(no decisive line recorded)",)), "```", "",
             "**Smallest reproduction.**", "", "```sh", reproduce(h), "```", "",
             f"**Where it was seen.** {where}; {h.cell}."]
    return "\n".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
