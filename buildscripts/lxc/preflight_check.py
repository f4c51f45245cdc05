"""One preflight check's outcome, and how the preflight asks a running container a question."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Attach = Callable[[Sequence[str]], tuple[int, str]]   # a command inside the container -> (exit, output)


@dataclass(frozen=True)
class Check:
    name: str
    status: str                       # pass | fail | warn | skip
    detail: str
    fix: tuple[str, ...] = ()         # exact lines to add, or commands to run
