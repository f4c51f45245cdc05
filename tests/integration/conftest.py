"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry_server import RegistryServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RegistryServer]:
    running = RegistryServer(tmp_path / "registry")
    running.folder.mkdir()
    running.start()
    yield running
    running.stop()
