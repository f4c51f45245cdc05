"""Fixtures shared by the integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.tinyimages import one_file_tar, owner_change
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


@pytest.fixture
def tiny(client: docker.DockerClient) -> Iterator[Callable[[], str]]:
    """Tiny images of unique content (a one-file `docker import`); removed afterwards."""
    made: list[str] = []

    def make() -> str:
        repository = f"sglang-images-bydigest-test-{uuid.uuid4().hex[:8]}"
        client.api.import_image_from_data(one_file_tar(f"by digest {uuid.uuid4()}".encode()), repository=repository,
                                          tag="t",
                                          changes=[owner_change()])
        made.append(f"{repository}:t")
        return str(client.images.get(made[-1]).id)

    yield make
    for ref in made:
        client.images.remove(ref, force=True)
