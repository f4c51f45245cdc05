"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.registry_server import RegistryServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RegistryServer]:
    running = RegistryServer(tmp_path / "registry")
    running.folder.mkdir()
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    """One client of the test engine per module, closed after it (an open socket fails the run: warnings are errors)."""
    found = docker.from_env()
    yield found
    found.close()
