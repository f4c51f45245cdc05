#!/usr/bin/env python3
"""Print a lockfile without the pins another lockfile has too (the layer below, installed already).

    python3 subtract.py LOCK [LOWER_LOCK]

A layer's lock repeats the packages of the layers below it at the same versions and hashes (lock/layers.py);
installing into an empty venv, those would be installed twice. A package the layer pins at another version than
the layer below (a toolkit's compiler over SGLang's) stays: it replaces the lower one, as `uv pip install`
does in one venv. Entries are a `name==version` line and its `--hash` continuation lines; comments stay out.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^]]*\])?==")


def entries(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        match = NAME.match(line)
        if match:
            current = found.setdefault(re.sub(r"[-_.]+", "-", match[1]).lower(), [])
            current.append(line)
        elif line.startswith((" ", "\t")) and current is not None and line.strip().startswith("--hash"):
            current.append(line)
        else:
            current = None
    return found


def main(argv: list[str]) -> int:
    lock = entries(Path(argv[1]))
    lower = entries(Path(argv[2])) if len(argv) > 2 else {}
    for name, lines in lock.items():
        if lower.get(name, [""])[0].split()[0:1] != lines[0].split()[0:1]:
            print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
