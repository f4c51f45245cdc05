"""A command of buildscripts/commands/ run as cli.main runs it (parse, then run), with the test's workspace and
environment, and its errors left to the test: `call(verify, ["IMAGE", ...], ws, env)`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from buildscripts.cli import Command
from buildscripts.workspace import Workspace


def call(command: Command, argv: Sequence[str], ws: Workspace | None = None,
         env: Mapping[str, str] | None = None) -> int:
    return command.run(command.parse(list(argv), ws or Workspace.at(), dict(env or {})))
