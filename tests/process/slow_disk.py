"""`python tests/process/slow_disk.py COMMAND ...`: the CLI on a slow disk, so that a kill lands mid-write.

Every fsync, rename and replace waits first (the steps where a set of files is being put in place), which
stretches the moments a killed process could leave a mix to seconds.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DELAY_S = 0.15


def slowed(call: Callable[..., Any]) -> Callable[..., Any]:
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(DELAY_S)
        return call(*args, **kwargs)
    return slow


if __name__ == "__main__":
    for name in ("fsync", "rename", "replace"):
        setattr(os, name, slowed(getattr(os, name)))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from buildscripts.cli import main

    sys.exit(main(sys.argv[1:]))
