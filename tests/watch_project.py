"""A copy of the project as a clone would be (a git repository of its own, one commit), and
`python -m buildscripts watch` run in it as a user runs it: what the release-watch tests of the process tier
(a loopback index) and of the integration tier (the proposal, locked against the real index) share. Nothing
is written to this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project(tmp: Path) -> Path:
    """A copy of the project with its own git history (one commit), as a clone would be."""
    copy = tmp / "project"
    for folder in ("buildscripts", "images", "lockfiles"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("matrix.yaml", "pyproject.toml", ".gitignore"):
        shutil.copy(ROOT / name, copy / name)
    git(copy, "init", "-q", "-b", "main")
    git(copy, "add", "-A")
    git(copy, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "the project")
    return copy


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def watch(copy: Path, *args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`watch ARGS` in `copy`, with the host's own index settings left out (each test names its index)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("UV_INDEX", "UV_DEFAULT_INDEX", "PIP_INDEX",
                                                                          "PIP_EXTRA_INDEX"))}
    return subprocess.run([sys.executable, "-m", "buildscripts", "watch", *args], cwd=copy, capture_output=True,
                          text=True, env={**clean, "PYTHONPATH": str(copy), "NO_COLOR": "1", **env}, timeout=timeout)
