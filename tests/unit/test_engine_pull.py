"""The engine's pull of an image by digest: a registry that stops sending is named within the deadline, as
every other read of a registry is, however large the image (the engine's progress is what is watched)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from buildscripts.errors import RegistryError
from buildscripts.registry import through_engine

DIGEST = "sha256:" + "c" * 64
REF = f"127.0.0.1:5999/staging@{DIGEST}"


class _Image:
    id = "sha256:" + "d" * 64


class _Client:
    """An engine whose pull streams `messages`, then hangs until released when `stall` is set."""

    def __init__(self, messages: list[dict[str, Any]], stall: bool = False) -> None:
        self.messages, self.stall, self.released = messages, stall, threading.Event()
        self.pulled: list[tuple[str, str]] = []
        self.api, self.images = self, self

    def pull(self, repository: str, tag: str, stream: bool, decode: bool) -> Iterator[dict[str, Any]]:
        self.pulled.append((repository, tag))

        def progress() -> Iterator[dict[str, Any]]:
            yield from self.messages
            if self.stall:
                self.released.wait(30)
        return progress()

    def get(self, ref: str) -> _Image:
        assert ref == f"127.0.0.1:5999/staging@{DIGEST}"
        return _Image()


def test_a_pull_that_makes_progress_returns_the_image_id() -> None:
    client = _Client([{"status": "Downloading"}, {"status": "Pull complete"}])
    assert through_engine.pull(client, REF, stall_s=5) == _Image.id    # type: ignore[arg-type]
    assert client.pulled == [("127.0.0.1:5999/staging", DIGEST)]


def test_a_registry_that_stops_sending_is_named_within_the_deadline() -> None:
    client = _Client([{"status": "Pulling fs layer"}, {"status": "Downloading"}], stall=True)
    began = time.monotonic()
    try:
        with pytest.raises(RegistryError, match=r"the registry 127\.0\.0\.1:5999 did not answer within 1 s"):
            through_engine.pull(client, REF, stall_s=1)    # type: ignore[arg-type]
    finally:
        client.released.set()
    assert time.monotonic() - began < 5


def test_the_engines_own_error_is_the_message() -> None:
    client = _Client([{"status": "Downloading"}, {"error": "unexpected EOF", "errorDetail": {"message": "EOF"}}])
    with pytest.raises(RegistryError, match="unexpected EOF"):
        through_engine.pull(client, REF, stall_s=5)    # type: ignore[arg-type]
