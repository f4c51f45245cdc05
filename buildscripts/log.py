"""Output people read: quiet on screen (one line per cell step), complete on disk.

rich handles colour, NO_COLOR and non-TTY output; on GitHub Actions steps fold into ::group::.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape  # user text (paths, names, log lines) is shown, never read as markup


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Rich's own answer to a closed stdout is `SystemExit(1)`; the reader going away (`matrix | head -1`)
        is a normal end, which the one place that exits (`cli.main`) turns into 0."""
        raise BrokenPipeError


# emoji=False: `:x:` in an image reference such as `repo:x: failed` stays text (icons are literal characters)
console = _Console(stderr=False, highlight=False, soft_wrap=True, emoji=False)
err = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

ON_GITHUB = False  # set by configure(): steps fold into ::group:: on GitHub Actions
MARK = {"passed": "[green]✓[/]", "failed": "[red]✕[/]", "skipped": "[yellow]–[/]", "aborted": "[dim]·[/]",
        "reused": "[green]↺[/]", "expected": "[green]x[/]", "unexpected": "[red]![/]"}


def configure(env: Mapping[str, str]) -> None:
    """Once, at the top: what the environment says about where output goes."""
    global ON_GITHUB  # noqa: PLW0603 - one switch for the whole process, set before any output
    ON_GITHUB = env.get("GITHUB_ACTIONS") == "true"


def step(cell_id: str, what: str, status: str, seconds: float | None = None, detail: str = "") -> None:
    """One line per cell step: `✓ sglang0.5.16-… build 63.2s`."""
    took = f" [dim]{seconds:.1f}s[/]" if seconds is not None else ""
    extra = f" [dim]{escape(detail)}[/]" if detail else ""
    console.print(f"{MARK.get(status, '?')} [bold]{escape(cell_id)}[/] {escape(what)}{took}{extra}")


def info(message: str) -> None:
    console.print(f"[dim]{escape(message)}[/]")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}")


def error(message: str) -> None:
    err.print(f"[red bold]error:[/] {escape(message)}")


@contextmanager
def working(message: str) -> Iterator[None]:
    """A live spinner with elapsed time on a terminal; nothing extra in logs or CI output."""
    if not console.is_terminal:
        yield
        return
    with console.status(f"[dim]{escape(message)}[/]"):
        yield


@contextmanager
def group(title: str) -> Iterator[None]:
    """A foldable group on GitHub Actions, a plain heading elsewhere."""
    if ON_GITHUB:
        print(f"::group::{title}", flush=True)
    else:
        console.rule(f"[bold]{title}", align="left")
    try:
        yield
    finally:
        if ON_GITHUB:
            print("::endgroup::", flush=True)
