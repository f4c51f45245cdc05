"""A comparison for its readers: one line per reason on the console, every difference in JSON and Markdown."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .diff import SAID, Comparison

EXAMPLES = 3          # paths named on a console line
MARKDOWN_ROWS = 200   # per reason on the page; the JSON holds them all


def lines(comparison: Comparison) -> list[str]:
    """What the console shows: `identical`, or one line per reason with how many and a few examples."""
    if comparison.identical:
        return [f"identical: {comparison.a} and {comparison.b} ({comparison.files[0]} files, "
                f"{comparison.layers[0]} layers)"]
    width = max(len(SAID[reason]) for reason in comparison.groups)
    shown = []
    for reason, found in comparison.groups.items():
        examples = ", ".join(d.path for d in found[:EXAMPLES]) + (", ..." if len(found) > EXAMPLES else "")
        shown.append(f"{SAID[reason]:<{width}}  {len(found):>6}  {examples}")
    return shown


def record(comparison: Comparison) -> dict[str, object]:
    return {"a": comparison.a, "b": comparison.b, "identical": comparison.identical,
            "files": list(comparison.files), "layers": list(comparison.layers),
            "counts": {reason: len(found) for reason, found in comparison.groups.items()},
            "differences": [asdict(d) for d in comparison.differences]}


def markdown(comparison: Comparison) -> str:
    out = [f"# {comparison.a} against {comparison.b}", "",
           f"Files a container sees: {comparison.files[0]} (A), {comparison.files[1]} (B); layers: "
           f"{comparison.layers[0]} (A), {comparison.layers[1]} (B).", ""]
    if comparison.identical:
        return "\n".join([*out, "**Identical**: every file, every layer's member order and the config.", ""])
    out += ["| reason | count |", "|---|---:|"]
    out += [f"| {SAID[reason]} | {len(found)} |" for reason, found in comparison.groups.items()]
    for reason, found in comparison.groups.items():
        out += ["", f"## {SAID[reason]}", "", "| path | A -> B |", "|---|---|"]
        out += [f"| `{d.path}` | {d.detail.replace('|', '/')} |" for d in found[:MARKDOWN_ROWS]]
        if len(found) > MARKDOWN_ROWS:
            out.append(f"| ... | {len(found) - MARKDOWN_ROWS} more in the JSON record |")
    return "\n".join([*out, ""])


def write(comparison: Comparison, folder: Path) -> tuple[Path, Path]:
    """compare.json and compare.md in `folder` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    data, page = folder / "compare.json", folder / "compare.md"
    data.write_text(json.dumps(record(comparison), indent=1) + "\n")
    page.write_text(markdown(comparison))
    return data, page
