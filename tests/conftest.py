"""Test layout: tests/unit never touches Docker (Popen raises there); tests/integration and
tests/e2e need a real engine; tests/gpu needs an NVIDIA GPU. Each folder's marker is applied here.

Without an engine, integration/e2e tests are skipped with that reason -- except under CI=true,
where a missing engine is an error (a green CI must not hide skipped work).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER_MARKERS = {"integration": "integration", "e2e": "e2e", "gpu": "gpu"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        marker = FOLDER_MARKERS.get(parts[0]) if len(parts) > 1 else None
        if marker:
            item.add_marker(getattr(pytest.mark, marker))


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "docker CLI not installed"
    probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    return None if probe.returncode == 0 else "Docker engine not reachable: " + probe.stderr.strip()[:200]


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a Docker engine: {problem}")
    pytest.skip(problem)


BASE_LABEL = "io.sglang-images.base"


def _base_images() -> set[str]:
    done = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter", f"label={BASE_LABEL}"],
                          capture_output=True, text=True, check=False)
    return set(done.stdout.split()) if done.returncode == 0 else set()


@pytest.fixture(scope="session", autouse=True)
def _remove_base_images_this_session_made() -> Iterator[None]:
    """Tests leave no image behind: a base image that appeared during the session goes at its end."""
    engine = _engine_problem() is None
    before = _base_images() if engine else set()
    yield
    if engine:
        made = _base_images() - before
        if made:
            subprocess.run(["docker", "rmi", "-f", *sorted(made)], capture_output=True, check=False)


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
    yield
