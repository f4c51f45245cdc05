"""A GitHub Actions step summary: the Markdown table appended to $GITHUB_STEP_SUMMARY when set."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..results import RunResults
from . import markdown


def write_summary(run: RunResults, env: Mapping[str, str]) -> Path | None:
    """Append the summary; None when not on GitHub Actions (the variable is unset)."""
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"## SGLang image compatibility\n\n{markdown.table(run)}\n\n")
    return path
