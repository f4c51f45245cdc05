"""What a test needs from the machine (a tool, the engine, the network): a FAILURE under CI=true, a skip with
its reason elsewhere. A green CI must never hide work it did not do; a developer's laptop without skopeo
should still run the rest.

A plain module rather than conftest itself, so that modules such as tinyimages can import it (pytest
advises against importing conftest modules); tests/conftest.py uses the same functions.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def unavailable(what: str, hint: str) -> NoReturn:
    """`what` is missing: fail under CI=true, else skip; both name `hint` (how to get it)."""
    if in_ci():
        pytest.fail(f"CI needs {what}: {hint}")
    pytest.skip(f"{what} is not available ({hint})")


def tools(*names: str, hint: str = ".ci/install-engine installs it") -> dict[str, str]:
    """The absolute path of each program in `names`; a missing one is `unavailable`."""
    found = {name: shutil.which(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        unavailable(", ".join(missing), hint)
    return {name: str(path) for name, path in found.items()}


def tool(name: str, hint: str = ".ci/install-engine installs it") -> str:
    return tools(name, hint=hint)[name]
