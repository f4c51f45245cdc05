"""The one place that exits: `python -m buildscripts COMMAND ...` (what the nox sessions call).

Each command lives in its own module, as `main(argv, ws, env) -> int` or in the shape of buildscripts/commands/
(`parse(argv, ws, env) -> Options`, then `run(options) -> int`): the Workspace (where the project, matrix, locks
and runs are) and the environment are made here, once, and passed down. A FatalError
anywhere becomes its message and exit code here (a traceback only with --debug).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence

from . import log
from .errors import EngineError, FatalError, Interrupted
from .workspace import Workspace

COMMAND_LAYER = "buildscripts.commands."   # modules of the one command shape: parse(argv, ws, env), then run(options)
COMMANDS = {
    "build": ("buildscripts.pipeline", "select cells, lock-check, build, verify, tag, report"),
    "matrix": ("buildscripts.matrix.listing", "list the selected cell ids (--json for machines)"),
    "lock": ("buildscripts.lock.command", "resolve hash-pinned lockfiles per layer (--check, --upgrade)"),
    "verify": ("buildscripts.verify.command", "the ladder on an image, on this Python (--host) or in LXC (--lxc)"),
    "report": ("buildscripts.report", "render console/Markdown/HTML/JUnit reports from saved results"),
    "tag": ("buildscripts.publish.tagcmd", "apply the good tags that verified cells of a results file earned"),
    "promote": ("buildscripts.publish.promote", "push good tags to a registry, by digest"),
    "export": ("buildscripts.publish.export", "an OCI archive of a verified image for Proxmox VE / LXC"),
    "check": ("buildscripts.publish.check", "was this very image verified on a GPU? its signed verdicts, checked"),
    "here": ("buildscripts.commands.here", "which image fits this machine, verified on its GPU, and how to run it"),
    "preflight": ("buildscripts.lxc.preflight", "read-only checks of an LXC host (and container) for GPUs"),
    "watch": ("buildscripts.watch.command", "releases newer than matrix.yaml holds (--json; --propose a change)"),
    "import-probe": ("buildscripts.verify.importprobe", "turn host-mode probe JSON into results.json + summary.md"),
    "keygen": ("buildscripts.trust.keygen", "a signing key pair for verifiers (CI secret + public key to commit)"),
    "setup": ("buildscripts.machine", "check, and on Debian as root install, what `build` or `tests` needs"),
}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
        print("usage: python -m buildscripts COMMAND [ARGS] [--debug]\n\ncommands:\n" + "\n".join(lines))
        return 0 if args and args[0] in ("-h", "--help") else 2
    env = dict(os.environ if env is None else env)
    log.configure(env)
    module = importlib.import_module(COMMANDS[args[0]][0])
    try:
        ws = Workspace.at()
        code: int = (module.run(module.parse(args[1:], ws, env)) if module.__name__.startswith(COMMAND_LAYER)
                     else module.main(args[1:], ws, env))
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
    """Whether `exc` is the docker SDK's. The SDK is imported by the commands that reach the engine, not here:
    a listing or a report starts without its tenth of a second (the fast tiers start the CLI fifty times)."""
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
