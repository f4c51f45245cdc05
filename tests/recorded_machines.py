"""Machines as `here` reads them, from tests/unit/data/machines/NAME/ (its README says what each is and where its
facts come from): the files under root/, and a runner that answers each command from commands.json (a command
not recorded there is a program that machine does not have)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from buildscripts.here.facts import Facts, Ran

MACHINES = Path(__file__).resolve().parent / "unit" / "data" / "machines"
NAMES = ("h200-host", "b200-host", "rtx-pro-6000-ct", "dgx-spark", "gh200-host", "docker-cdi-r570")


def recorded(folder: Path | str) -> Facts:
    folder = MACHINES / folder if isinstance(folder, str) else folder
    outputs = json.loads((folder / "commands.json").read_text(encoding="utf-8"))

    def run(argv: Sequence[str]) -> Ran | None:
        said = outputs.get(" ".join(argv))
        return None if said is None else Ran(int(said["returncode"]), str(said["output"]))

    return Facts(folder / "root", run)


def copied(name: str, into: Path) -> Path:
    """A copy of a recorded machine to change (a node taken away, a command that fails)."""
    target = into / name
    shutil.copytree(MACHINES / name, target)
    return target


def set_output(folder: Path, command: str, output: str | None, returncode: int = 0) -> None:
    """Record another answer for `command` (None: the program is not there)."""
    path = folder / "commands.json"
    outputs = json.loads(path.read_text(encoding="utf-8"))
    if output is None:
        outputs.pop(command, None)
    else:
        outputs[command] = {"returncode": returncode, "output": output}
    path.write_text(json.dumps(outputs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
