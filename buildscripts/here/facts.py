"""The one way `here` reads this machine: files under a root folder, and commands through one runner.

On a real machine the root is `/` and the runner runs the program (nvidia-smi, docker, uname, df) with a short
deadline; a test gives a folder of facts recorded on another machine (an H200 host, a Proxmox CT) and a runner that
answers from the outputs recorded there. Nothing else under here/ opens a file of the machine or starts a program,
so every answer `here` gives can be tested from what a machine showed, without that machine.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import proc

DEADLINE_S = 10.0     # nvidia-smi on a GPU in a bad state, or an engine that does not answer, must not hold `here`


@dataclass(frozen=True)
class Ran:
    """What one command said: its exit status and its output (stdout and stderr together)."""

    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


Runner = Callable[[Sequence[str]], "Ran | None"]   # None: no such program on this machine


@dataclass(frozen=True)
class Facts:
    root: Path        # `/` on a real machine; a recorded machine's folder in tests
    run: Runner

    def path(self, path: str) -> Path:
        """Where the machine's `path` is under the root (for a reader that takes folders: CDI specs)."""
        return self.root / path.lstrip("/")

    def read(self, path: str) -> str | None:
        """A file's text (bytes that are not UTF-8 replaced); None when it is absent or cannot be read."""
        try:
            return self.path(path).read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return self.path(path).exists()

    def names(self, folder: str, pattern: str) -> list[str]:
        """Paths (as the machine names them) of `folder`'s entries matching `pattern`, sorted."""
        base = self.path(folder)
        try:
            found = sorted(p.name for p in base.glob(pattern))
        except OSError:
            return []
        return [f"{folder.rstrip('/')}/{name}" for name in found]


def live_runner(env: Mapping[str, str]) -> Runner:
    """Runs a program of this machine, found on PATH, with the environment `here` was given."""

    def run(argv: Sequence[str]) -> Ran | None:
        program = shutil.which(argv[0], path=env.get("PATH"))
        if program is None:
            return None
        done = proc.run([program, *argv[1:]], timeout=DEADLINE_S, env=dict(env), inherit_env=False)
        said = done.output if not done.timed_out else f"{done.output}\n(no answer within {DEADLINE_S:.0f} s)"
        return Ran(done.returncode if not done.timed_out else 124, said)

    return run


def live(env: Mapping[str, str]) -> Facts:
    """This machine's facts."""
    return Facts(Path("/"), live_runner(env))
