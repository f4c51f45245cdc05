"""This test session's name, as the owner of what it builds (see tests/conftest.py).

Set in the environment when first imported (conftest imports it before any test runs), so that every
CLI a test starts builds under the same owner name.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid

from buildscripts.build.base import OWNER_ENV, OWNER_LABEL
from buildscripts.pipeline import CACHE_KEEP_ENV, KEEP_SUPERSEDED_ENV
from buildscripts.trust.keys import KEY_DIR_ENV, KEY_ENV, KEY_FILE_ENV

OWNER = f"pytest-{uuid.uuid4().hex[:12]}"
os.environ[OWNER_ENV] = OWNER
# The builds the tests start remove nothing they did not make: no superseded candidate of the main job's
# cells, no BuildKit cache (buildscripts/build/footprint.py).
os.environ[CACHE_KEEP_ENV] = "none"
os.environ[KEEP_SUPERSEDED_ENV] = "1"


def owner_label() -> str:
    """KEY=VALUE of the label that marks an image as made by this test session."""
    return f"{OWNER_LABEL}={OWNER}"
# Records the tests seal are sealed with a throw-away key of this session (made on first use in a folder
# that goes with the machine's temporary files), never with a CI secret or the user's own verifier key.
KEY_DIR = tempfile.mkdtemp(prefix=f"sglang-images-{OWNER}-keys-")
os.environ[KEY_DIR_ENV] = KEY_DIR
for name in (KEY_ENV, KEY_FILE_ENV):
    os.environ.pop(name, None)
atexit.register(shutil.rmtree, KEY_DIR, ignore_errors=True)
