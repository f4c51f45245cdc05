"""A command of buildscripts/commands/ run as cli.main runs it (parse, then run), with the test's workspace and
environment, and its errors left to the test: `call(verify, ["IMAGE", ...], ws, env)`.

Whatever `env` a test gives, the command keeps the test session's own key folder and verdict history
(tests/session.py, tests/conftest.py) unless the test names others: a command given an empty environment would
otherwise seal with, and write, the user's own verifier key."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from buildscripts.cli import Command
from buildscripts.trust.keys import KEY_DIR_ENV
from buildscripts.trust.seen import STATE_ENV
from buildscripts.workspace import Workspace

SESSION_NAMES = (KEY_DIR_ENV, STATE_ENV)


def call(command: Command, argv: Sequence[str], ws: Workspace | None = None,
         env: Mapping[str, str] | None = None) -> int:
    session = {name: os.environ[name] for name in SESSION_NAMES if name in os.environ}
    return command.run(command.parse(list(argv), ws or Workspace.at(), {**session, **(env or {})}))
