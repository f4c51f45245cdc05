"""Test layout: tests/unit never touches Docker (Popen raises there); tests/integration and
tests/e2e need a real engine; tests/gpu needs an NVIDIA GPU. Each folder's marker is applied here.

Without an engine, integration/e2e tests are skipped with that reason -- except under CI=true,
where a missing engine is an error (a green CI must not hide skipped work); every other missing
tool goes through the same rule (tests/needs.py).

What the tests build carries this session's owner label (tests/session.py sets SGLANG_IMAGES_OWNER,
which the base and cell builders turn into io.sglang-images.owner; tinyimages and the promote tests
set it on what they make), and the session removes exactly the images with that label at its end:
never an image that someone else's build made beside the tests. A unit-only run never asks the
engine anything.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildscripts.trust import keys, seen
from tests import needs
from tests.session import ENGINE_USED, STATE_DIR, owner_label

ROOT = Path(__file__).resolve().parent.parent
USER_KEY = keys.key_dir({}) / keys.LOCAL_KEY   # this machine's verifier key: never made by a test
USER_STATE = seen.state_dir({})                 # what this machine's user has seen of verdicts: never written by one
FOLDER_MARKERS = {"integration": "integration", "e2e": "e2e", "gpu": "gpu"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        marker = FOLDER_MARKERS.get(parts[0]) if len(parts) > 1 else None
        if marker:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's `--dist loadfile` (a file to a worker), handing a worker its next file later than xdist does.

    A file that holds gigabytes of disk while it runs (test_build_once.py, up to 26 GB) is an ordinary unit of
    work here: it reserves its room (tests/disk_room.py), so it runs beside the others where the disk has room
    and waits where it has not."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no type information
        def _reschedule(self, node: Any) -> None:
            # xdist hands a worker its next file once 2 of its tests are left; a worker runs a test only when it
            # knows the next one, so 1 is the least. With 2 a file waited behind the last two LXC tests (minutes
            # each) while the other workers had nothing left to do.
            if node.shutting_down or not self.workqueue or self._pending_of(self.assigned_work[node]) <= 1:
                super()._reschedule(node)

    return Scheduling(config, log)


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker CLI"
    probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    return None if probe.returncode == 0 else "a reachable Docker engine (" + probe.stderr.strip()[:200] + ")"


def _images_of_this_session() -> list[str]:
    done = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter", f"label={owner_label()}"],
                          capture_output=True, text=True, check=False)
    return sorted(set(done.stdout.split())) if done.returncode == 0 else []


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """The engine, for integration/e2e tests; the images this session made go at its end (pytest_sessionfinish)."""
    problem = _engine_problem()
    if problem is not None:
        needs.unavailable(problem, ".ci/install-engine installs and starts it")
    ENGINE_USED.touch()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The images this session made go, once every worker is done (children first: `rmi -f` of a parent with
    children fails, so repeat while anything goes). Run by the process that started the session: pytest itself,
    or xdist's controller, not by each of its workers."""
    if hasattr(session.config, "workerinput") or not ENGINE_USED.exists():
        return
    for _ in range(5):
        made = _images_of_this_session()
        if not made:
            break
        subprocess.run(["docker", "rmi", "-f", *made], capture_output=True, check=False)
    ENGINE_USED.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _folder_rules(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A unit test that reaches Docker (or any subprocess) by accident fails loudly."""
    parts = Path(str(request.node.fspath)).parts
    if "integration" in parts or "e2e" in parts:
        request.getfixturevalue("docker_engine")
    if "unit" in parts:
        def refuse(*args: object, **kwargs: object) -> None:
            msg = f"unit tests must not start processes: {args[0] if args else kwargs}"
            raise AssertionError(msg)
        monkeypatch.setattr(subprocess, "Popen", refuse)
    # each test checks with a history of its own (not made until something is kept)
    own = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv(seen.STATE_ENV, str(Path(STATE_DIR) / own))
    had_key, had_state = USER_KEY.exists(), USER_STATE.exists()
    yield
    if USER_KEY.exists() and not had_key:  # a command run with an empty environment made the user's own key
        pytest.fail(f"the test wrote the verifier key {USER_KEY}: pass the test session's environment "
                    f"(SGLANG_IMAGES_KEY_DIR, tests/session.py) to what seals records")
    if USER_STATE.exists() and not had_state:
        pytest.fail(f"the test wrote {USER_STATE}: pass the test session's environment ({seen.STATE_ENV}) to "
                    "what checks verdicts")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary folder that others may pass into and read (pytest's own are its owner's alone): where a
    test puts what host mode's identity for the code under test must reach (verify/identity.py)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="sglang-images-open-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
