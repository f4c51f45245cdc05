"""The one place that exits: `python -m buildscripts COMMAND ...` (what the nox sessions call).

Each command is a module of buildscripts/commands/ in one shape: `parse(argv, ws, env) -> Options` (frozen, made
once), then `run(options) -> exit code`. The Workspace (where the project, matrix, locks and runs are) and the
environment are made here, once, and handed to `parse`. A FatalError anywhere becomes its message and exit code
here (a traceback only with --debug), as pypa/build's `__main__` turns errors into exit codes in one handler.
The command modules are imported here by name, not looked up at run time, so that the import contracts see every
arrow; each loads its library when it runs, and none imports the docker SDK, numpy, safetensors or testcontainers
at its top (tests/process/test_import_cost.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from . import log
from .commands import (
    bisect,
    build,
    check,
    compare,
    export,
    here,
    import_probe,
    keygen,
    lock,
    matrix,
    preflight,
    promote,
    report,
    setup,
    tag,
    verify,
    watch,
)
from .errors import EngineError, FatalError, Interrupted
from .workspace import Workspace


class Command(Protocol):
    """What every module of buildscripts/commands/ is: a line for the list, its options made once, its run."""

    ABOUT: str

    def parse(self, argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Any: ...

    def run(self, options: Any) -> int: ...


COMMANDS: dict[str, Command] = {
    "build": build, "matrix": matrix, "lock": lock, "verify": verify, "report": report, "tag": tag,
    "promote": promote, "export": export, "check": check, "here": here, "preflight": preflight, "watch": watch,
    "import-probe": import_probe, "keygen": keygen, "setup": setup, "compare": compare, "bisect": bisect,
}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {command.ABOUT}" for name, command in COMMANDS.items()]
        print("usage: python -m buildscripts COMMAND [ARGS] [--debug]\n\ncommands:\n" + "\n".join(lines))
        return 0 if args and args[0] in ("-h", "--help") else 2
    env = dict(os.environ if env is None else env)
    log.configure(env)
    command = COMMANDS[args[0]]
    try:
        code: int = command.run(command.parse(args[1:], Workspace.at(), env))
        sys.stdout.flush()  # here, not at exit, so that a reader gone before the end is caught below
        return code
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        error: FatalError = Interrupted(
            "interrupted: results so far are saved; no unverified image was given a good tag")
    except FatalError as exc:
        error = exc
    except Exception as exc:
        if not _from_the_engine(exc):
            raise
        # The engine changed under the run (an image removed by someone else, the daemon restarted): the
        # step that asked has no better words for it than the engine's own.
        error = EngineError(f"the Docker engine failed a request: {exc}",
                            hint="check the engine (`docker info`) and run the command again")
    if debug:
        raise error
    log.error(str(error))
    return error.exit_code


def _from_the_engine(exc: Exception) -> bool:
    """Whether `exc` is the docker SDK's. The SDK is imported by what reaches the engine, when it does, not
    here: a listing or a report starts without its tenth of a second (the fast tiers start the CLI fifty times)."""
    errors = sys.modules.get("docker.errors")
    return errors is not None and isinstance(exc, errors.DockerException)


def _reader_gone() -> int:
    """stdout was closed by its reader (`matrix | head -1`): a normal end for a listing, not an error.
    Whatever is still buffered goes to /dev/null, so that the interpreter's own flush at exit cannot fail
    again (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


if __name__ == "__main__":
    sys.exit(main())
