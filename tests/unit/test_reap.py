"""Which leftover verification containers the next run removes: those whose owner process is gone (a pid that
no longer exists, or one that now belongs to a later process), never a living run's or a kept one."""

from __future__ import annotations

import os
import socket
from typing import Any

from buildscripts.verify import container

ME = container._process_identity(os.getpid())


class FakeContainer:
    def __init__(self, name: str, owner: str, *, kept: bool = False) -> None:
        self.name = name
        self.labels = {container.LABEL_RUN: "r", container.LABEL_HOST: socket.gethostname(),
                       container.LABEL_OWNER: owner, **({container.LABEL_KEPT: "1"} if kept else {})}
        self.removed = False

    def remove(self, force: bool = False) -> None:
        assert force
        self.removed = True


class FakeClient:
    def __init__(self, found: list[FakeContainer]) -> None:
        self.found = found
        self.filters: dict[str, Any] = {}
        self.containers = self

    def list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[FakeContainer]:
        self.filters = filters or {}
        return self.found


def test_only_containers_of_dead_owners_are_removed() -> None:
    pid, start = ME.split()
    living = FakeContainer("living", ME)
    dead = FakeContainer("dead", f"{2**22 + 1} 12345")                 # above pid_max: no such process
    reused = FakeContainer("reused", f"{pid} {int(start) + 1}")       # this pid, but another start time
    kept = FakeContainer("kept", f"{2**22 + 1} 12345", kept=True)
    client = FakeClient([living, dead, reused, kept])
    assert container.reap_orphans(client) == ["dead", "reused"]  # type: ignore[arg-type]
    assert [c.removed for c in (living, dead, reused, kept)] == [False, True, True, False]
    assert client.filters == {"label": [f"{container.LABEL_HOST}={socket.gethostname()}", container.LABEL_OWNER]}


def test_a_process_identity_is_its_pid_and_start_time() -> None:
    pid, start = ME.split()
    assert pid == str(os.getpid()) and start.isdigit()
    assert container._process_identity(2**22 + 1) == ""
