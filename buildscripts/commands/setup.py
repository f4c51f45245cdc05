"""`python -m buildscripts setup [--for build|tests|check] [-- BUILD_ARGS]`: check, and on Debian as root install,
what a command needs (machine.py). BUILD_ARGS are the build's own arguments (`nox -s build` passes them on): its
--matrix, --only and --skip, read with the build's own flags, say which cells it builds and so which CPUs need QEMU
user emulation here; the rest is the build's to check."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import arguments
from ..workspace import Workspace

ABOUT = "check, and on Debian as root install, what `build` or `tests` needs"


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]
    purpose: str = "build"                  # build, tests or check (machine.NEEDS)
    # the cells the build will build, as its own --matrix (default: the workspace's), --only and --skip select them
    matrix: Path | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    build_help: bool = False                # the build's --help: it prints it, builds nothing


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    from .. import machine

    ap = argparse.ArgumentParser(prog="python -m buildscripts setup",
                                 description="Check, and on Debian as root install, what a command needs.",
                                 epilog="After `--`, the build's own arguments: its --matrix, --only and --skip "
                                        "say which CPUs need QEMU user emulation here.")
    ap.add_argument("--for", dest="purpose", choices=sorted(machine.NEEDS), default=Options.purpose)
    own, build_argv = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    purpose = ap.parse_args(list(own)).purpose
    if {"-h", "--help"} & set(build_argv):
        return Options(ws=ws, env=env, purpose=purpose, build_help=True)
    matrix, only, skip = build_selection(build_argv)
    return Options(ws=ws, env=env, purpose=purpose, matrix=matrix, only=only, skip=skip)


def run(options: Options) -> int:
    from .. import machine

    if options.build_help:
        return 0   # the build prints its help; it builds nothing
    selection = machine.Selection(matrix=options.matrix, only=options.only, skip=options.skip)
    return machine.setup(options.purpose, selection, options.ws, options.env)


def build_selection(build_argv: Sequence[str]) -> tuple[Path | None, tuple[str, ...], tuple[str, ...]]:
    """(--matrix, --only, --skip) from the build's arguments, the same flags it parses (arguments.py); the rest
    (--run-id, --stage, ...) is the build's to check, not setup's."""
    ap = argparse.ArgumentParser(prog="nox -s build --", add_help=False)
    arguments.add_matrix(ap, None)
    arguments.add_selection(ap, skip=True)
    a, _rest = ap.parse_known_args(list(build_argv))
    return a.matrix, tuple(a.only), tuple(a.skip)
