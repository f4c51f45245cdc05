"""A GitHub Actions step summary: the Markdown table appended to $GITHUB_STEP_SUMMARY when set."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from . import markdown
from .weigh import Weighed

VARIABLE = "GITHUB_STEP_SUMMARY"


def target(env: Mapping[str, str]) -> Path | None:
    """The summary file, None when not on GitHub Actions (the variable is unset)."""
    value = env.get(VARIABLE)
    return Path(value) if value else None


def check(env: Mapping[str, str]) -> None:
    """A summary that cannot be appended to is a ConfigError naming the variable, said before any work."""
    path = target(env)
    if path is not None:
        _append(path, "")


def write_summary(weighed: Weighed, env: Mapping[str, str]) -> Path | None:
    """Append the summary; None when not on GitHub Actions."""
    path = target(env)
    if path is None:
        return None
    _append(path, f"## SGLang image compatibility\n\n{markdown.table(weighed)}\n\n")
    return path


def _append(path: Path, text: str) -> None:
    try:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        msg = f"cannot append the step summary to ${VARIABLE} ({path}): {exc.strerror}"
        raise ConfigError(msg, hint=f"${VARIABLE} is set by GitHub Actions; unset it outside a workflow, or point "
                                    "it at a file you can write") from None
