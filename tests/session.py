"""This test session's name, as the owner of what it builds (see tests/conftest.py).

Set in the environment when first imported (conftest imports it before any test runs), so that every
CLI a test starts builds under the same owner name.
"""

from __future__ import annotations

import os
import uuid

from buildscripts.build.base import OWNER_ENV, OWNER_LABEL

OWNER = f"pytest-{uuid.uuid4().hex[:12]}"
os.environ[OWNER_ENV] = OWNER


def owner_label() -> str:
    """KEY=VALUE of the label that marks an image as made by this test session."""
    return f"{OWNER_LABEL}={OWNER}"
