"""The compatibility table in Markdown: the README shows it between two markers.

`update_readme` rewrites only what lies between `<!-- compat-table:start -->` and
`<!-- compat-table:end -->`; the README is never edited by hand there (`nox -s report` does it).
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import disk
from ..errors import ConfigError
from ..results import CellResult
from . import bygpu, common, grid, weigh
from .weigh import Weighed

START = "<!-- compat-table:start -->"
END = "<!-- compat-table:end -->"

# What text from the results may not carry into Markdown as it is: line breaks and other control characters
# (a row would end, a marker line could begin), table pipes, HTML (`<` opens a tag or a marker comment, `&`
# an entity), the backtick (it closes a code span) and the brackets of a link.
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": "&#96;", "|": "\\|", "[": "\\[", "]": "\\]",
             "\\": "\\\\"}
_UNSAFE = re.compile(r"[&<>`|\[\]\\]|[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_PLAIN_CODE = re.compile(r"[A-Za-z0-9._+@:/=-]+")  # what a code span shows as it is


def _cell_text(text: str) -> str:
    """Text from the results, safe in a table cell, a list item and the README: no line break or other
    control character (each becomes a space), no pipe, HTML, backtick or link bracket."""
    return _UNSAFE.sub(lambda m: _ENTITIES.get(m[0], " "), text)


def _code(text: str) -> str:
    """Text from the results as inline code: a backtick span when it is plain (a real cell id always is),
    else an HTML <code> element around the escaped text (a backtick span cannot escape anything)."""
    return f"`{text}`" if _PLAIN_CODE.fullmatch(text) else f"<code>{_cell_text(text)}</code>"




def answer_view(weighed: Weighed) -> list[str]:
    """The answer a user came for: per platform and GPU arch, the tag to pull, how far it was verified there (one
    word, one mark), and the command that checks its signed verdict."""
    lines = ["| platform | GPU arch | for example | tag to pull | state there | check its signed verdict |",
             "|:--|:--|:--|:--|:--|:--|"]
    for row in bygpu.rows(weighed):
        answer = row.answer
        products = _cell_text(", ".join(p.removeprefix("NVIDIA ") for p in row.products)) or "—"
        check = _code(answer.check) if answer.check else "—"
        tag = _code(answer.tag) if answer.cell_id else "—"
        lines.append(f"| {_cell_text(row.platform)} | {row.arch} | {products} | {tag} | {answer.label} | {check} |")
    return lines


def platform_grids(weighed: Weighed) -> list[str]:
    """One grid per platform, its reachable cells only, each slot in one mark and word; the combinations not built
    counted once per reason."""
    lines: list[str] = []
    for found in grid.platform_grids(weighed):
        view = found.grid
        head = ["SGLang", "torch lane", *map(_cell_text, view.toolkits)]
        lines += [*([""] if lines else []), f"**{_cell_text(found.platform)}** (base {_cell_text(view.base)}):", "",
                  "| " + " | ".join(head) + " |", "|:--|:--|" + "|".join([":-:"] * (len(head) - 2)) + "|"]
        for version, lane in view.rows:
            slots = [view.at(version, lane, t) for t in view.toolkits]
            row = [_cell_text(version), _cell_text(lane),
                   *(common.state_label(c, weighed) if c else "" for c in slots)]
            lines.append("| " + " | ".join(row) + " |")
        if found.excluded:
            said = "; ".join(f"{n} {_cell_text(_short_reason(why))}" for why, n in found.excluded)
            lines += ["", f"Not built for {_cell_text(found.platform)}: {said}."]
    return lines


def _short_reason(reason: str) -> str:
    """An exclusion's reason up to its first colon or period: what it is, not its whole story."""
    return reason.split(":", maxsplit=1)[0].split(". ", maxsplit=1)[0].strip().rstrip(".")


def readme_block(weighed: Weighed) -> str:
    """What the README shows: the answer by GPU, the grids, a short legend and the way to the details."""
    return "\n".join([
        "Which image for your GPU, and was it verified there, from the committed evidence "
        "(every stage, reason and run: [docs/compatibility.md](docs/compatibility.md)):", "",
        *answer_view(weighed), "", *platform_grids(weighed), "", common.ANSWER_LEGEND + ".",
        "Only a record sealed by a committed key, of the cell's own image and its current definition in matrix.yaml, "
        "counts ([trust.md](docs/trust.md)).",
    ])


def gpu_view(weighed: Weighed) -> list[str]:
    """The view by GPU, one table per platform: per arch, what to pull, what was verified there (by digest, with the
    check command), what was only compiled and audited for it, and plainly where nothing ran yet."""
    lines: list[str] = []
    for platform, rows in bygpu.views(weighed):
        lines += [*([""] if lines else []), f"By GPU (images for {platform}): {bygpu.ABOUT}.", "",
                  "| " + " | ".join(bygpu.HEADINGS) + " |", "|:--|:--|:--|:--|:--|"]
        for row in rows:
            verified = "<br>".join(f"{_code(v.pull)}" + (f": {_code(v.check)}" if v.check else " (not pushed)")
                                   for v in row.verified)
            if not verified:
                verified = "nothing has run on this GPU yet" if row.nothing_ran else "nothing verified yet"
            ran = "<br>".join([*map(_code, row.ran), *(f"{_code(c)} (claimed, not vouched for)" for c in row.claimed)])
            compiled = "<br>".join(map(_code, row.compiled)) or "—"
            products = _cell_text(", ".join(row.products)) or "—"
            lines.append(f"| {row.arch} | {products} | {verified} | {ran or '—'} | {compiled} |")
    return lines


def other_runs(weighed: Weighed) -> list[str]:
    """What no grid holds (host mode, in place in LXC, another image under a cell's name, other bases): one line
    each, with the same verdict and archs."""
    others = grid.others(weighed)
    if not others:
        return []
    lines = ["Other runs (not images of today's matrix: host mode, in place in LXC, other images, other bases):", ""]
    for cell in others:
        shown = common.shown(cell, weighed)
        archs = grid.arch_line(cell, vouched=weighed.vouched(cell))
        lines.append(f"- {_code(cell.cell_id)} ({_cell_text(grid.place(cell))}): {shown.label}"
                     + (f" {_cell_text(archs)}" if archs else "")
                     + f" — {_cell_text(shown.short)}")
    return lines


def stage_table(weighed: Weighed) -> list[str]:
    """Every cell, stage by stage (build, then the ladder), its verdict and where its GPU stages ran."""
    run = weighed.run
    columns = common.stage_columns(run)
    head = ["cell", *map(_cell_text, columns), "verdict", "GPU stages ran on"]
    align = [":--", *([":-:"] * len(columns)), ":--", ":--"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for cell in _reachable(weighed):
        marks = [common.mark(common.outcome(cell, c)[0]) for c in columns]
        gpus = common.gpu_summary(cell, vouched=weighed.vouched(cell))
        row = [_code(cell.cell_id), *marks, common.shown(cell, weighed).label, _cell_text(gpus)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _reachable(weighed: Weighed) -> list[CellResult]:
    """Every cell but those an exact pin rules out (said once under the grid)."""
    pinned = {c.cell_id for found in grid.platform_grids(weighed) for c in found.grid.pinned}
    return [c for c in common.sort_cells(weighed.run.cells) if c.cell_id not in pinned]


def table(weighed: Weighed) -> str:
    """Everything: the answer, the grids, the view by GPU in detail, the other runs, then the stage-by-stage table
    with each verdict's reason (reports/compat.md, docs/compatibility.md, the GitHub step summary)."""
    run = weighed.run
    notes = [f"- {_code(cell.cell_id)}: {_cell_text(common.shown(cell, weighed).why)}" for cell in _reachable(weighed)]
    when = run.finished or run.started
    parts = [["## Which image for your GPU", "", *answer_view(weighed), "", common.ANSWER_LEGEND + "."],
             ["## Each platform's cells", "", *platform_grids(weighed)],
             ["## By GPU, in detail", "", *gpu_view(weighed)], other_runs(weighed)]
    return "\n".join([
        *[line for part in parts if part for line in [*part, ""]],
        "## Every cell, stage by stage", "", *stage_table(weighed), "", common.LEGEND, "", weigh.LEGEND, "",
        "<details><summary>Why each cell got its verdict</summary>", "", *notes, "", "</details>", "",
        f"_Rendered from results of {_cell_text(run.run_id)} ({_cell_text(when)}) by `nox -s report`; do not edit._",
    ])


def document(weighed: Weighed) -> str:
    """A standalone page (reports/compat.md, docs/compatibility.md) with everything."""
    return f"# Compatibility: which image for your GPU, and what ran where\n\n{table(weighed)}\n"


DETAILS = Path("docs") / "compatibility.md"   # beside the README: everything the README's block leaves out


def update_details(readme: Path, weighed: Weighed) -> Path | None:
    """Write `document` to docs/compatibility.md beside `readme`; the file written when it changed, else None."""
    path = disk.target_of(readme).parent / DETAILS
    text = document(weighed)
    try:
        if path.read_text(encoding="utf-8") == text:
            return None
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    return disk.write_text(path, text)


def update_readme(readme: Path, weighed: Weighed) -> Path | None:
    """Replace the table between the markers; the file written when it changed, else None.

    Each marker must be there exactly once, start before end (ConfigError otherwise: with two of either, which
    pair holds the table is a guess). A README that is a symbolic link is written through (`disk.write_text`):
    the link stays, its target gets the table.
    """
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {readme}: {exc.strerror}"
        raise ConfigError(msg, hint="pass --readme PATH, or leave out --update-readme") from None
    counts = (text.count(START), text.count(END))
    start, end = text.find(START), text.find(END)
    if start < 0 or end < 0 or end < start:
        msg = f"{readme} has no compatibility-table markers ({START} ... {END}, in that order)"
        raise ConfigError(msg, hint="add both marker lines where the table belongs, then run `nox -s report`")
    if counts != (1, 1):
        msg = f"{readme} has {counts[0]} start and {counts[1]} end compatibility-table markers; it needs one of each"
        raise ConfigError(msg, hint="keep one marker line of each where the table belongs (delete what lies between "
                                    "extra ones), then run `nox -s report`")
    new = text[: start + len(START)] + "\n" + readme_block(weighed) + "\n" + text[end:]
    if new == text:
        return None
    return disk.write_text(readme, new)
