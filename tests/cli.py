"""`python -m buildscripts ...` the way a user runs it, from the project root, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "buildscripts", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)
