"""The one place that exits: `python -m buildscripts COMMAND ...` (what the nox sessions call).

Each command lives in its own module as `main(argv) -> int`; a FatalError anywhere becomes its
message and exit code here (a traceback only with --debug).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from . import log
from .errors import FatalError, Interrupted

COMMANDS = {
    "build": ("buildscripts.pipeline", "select cells, lock-check, build, verify, tag, report"),
    "matrix": ("buildscripts.listing", "list the selected cell ids (--json for machines)"),
    "lock": ("buildscripts.lock", "resolve hash-pinned lockfiles per layer (--check, --upgrade)"),
    "verify": ("buildscripts.verify", "run the verification ladder on an image, or on this Python (--host)"),
    "report": ("buildscripts.report", "render console/Markdown/HTML/JUnit reports from saved results"),
    "promote": ("buildscripts.promote", "push good tags to a registry, by digest"),
    "import-probe": ("buildscripts.hostrun", "turn host-mode probe JSON into results.json + summary.md"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
        print("usage: python -m buildscripts COMMAND [ARGS] [--debug]\n\ncommands:\n" + "\n".join(lines))
        return 0 if args and args[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    try:
        code: int = module.main(args[1:])
        return code
    except KeyboardInterrupt:
        error: FatalError = Interrupted(
            "interrupted: results so far are saved; no unverified image was given a good tag")
    except FatalError as exc:
        error = exc
    if debug:
        raise error
    log.error(str(error))
    return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
