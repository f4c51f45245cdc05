"""This test session's name, as the owner of what it builds (see tests/conftest.py).

Set in the environment when first imported (conftest imports it before any test runs), so that every
CLI a test starts builds under the same owner name. pytest-xdist's workers (`nox -s tests` runs the tiers in
parallel) are processes of their own that import this module again: they take the name of the run that started
them, which they inherit in the environment, so that what any of them builds carries one label and goes once, at
the end of the whole run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from buildscripts.build.base import OWNER_ENV, OWNER_LABEL
from buildscripts.pipeline_options import CACHE_KEEP_ENV, KEEP_SUPERSEDED_ENV
from buildscripts.trust.keys import KEY_DIR_ENV, KEY_ENV, KEY_FILE_ENV
from buildscripts.trust.seen import STATE_ENV

SESSION_ENV = "SGLANG_IMAGES_TEST_SESSION"   # the run's owner name, for its xdist workers only
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
OWNER = (os.environ.get(SESSION_ENV) if WORKER else None) or f"pytest-{uuid.uuid4().hex[:12]}"
os.environ[SESSION_ENV] = OWNER
os.environ[OWNER_ENV] = OWNER
# The builds the tests start remove nothing they did not make: no superseded candidate of the main job's
# cells, no BuildKit cache (buildscripts/build/footprint.py).
os.environ[CACHE_KEEP_ENV] = "none"
os.environ[KEEP_SUPERSEDED_ENV] = "1"
# Made when a test of any worker first asks for the engine: the run's end then removes what carries the label
# (a unit-only run never asks the engine anything).
ENGINE_USED = Path(tempfile.gettempdir()) / f"sglang-images-{OWNER}-engine-used"


def owner_label() -> str:
    """KEY=VALUE of the label that marks an image as made by this test session."""
    return f"{OWNER_LABEL}={OWNER}"


# Records the tests seal are sealed with a throw-away key of this process (made on first use in a folder that goes
# with the machine's temporary files), never with a CI secret or the user's own verifier key. Each xdist worker
# has its own: a record is sealed and read back within one test, or one module, which runs on one worker.
KEY_DIR = tempfile.mkdtemp(prefix=f"sglang-images-{OWNER}{'-' + WORKER if WORKER else ''}-keys-")
os.environ[KEY_DIR_ENV] = KEY_DIR
for name in (KEY_ENV, KEY_FILE_ENV):
    os.environ.pop(name, None)
atexit.register(shutil.rmtree, KEY_DIR, ignore_errors=True)

# What `check` keeps of the verdicts it saw (trust/seen.py) goes to a folder of this process too, never the user's;
# tests/conftest.py gives each test a folder of its own inside it, so that no test sees what another one kept.
STATE_DIR = tempfile.mkdtemp(prefix=f"sglang-images-{OWNER}{'-' + WORKER if WORKER else ''}-state-")
os.environ[STATE_ENV] = STATE_DIR
atexit.register(shutil.rmtree, STATE_DIR, ignore_errors=True)
