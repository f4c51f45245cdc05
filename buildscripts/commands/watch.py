"""`python -m buildscripts watch`: releases on the package index newer than matrix.yaml holds, and what follows.

    watch [--json] [--matrix PATH] [--timeout S]
          [--propose [--branch NAME] [--build] [--out DIR]]

Asks the host's package index (its pip settings, as `nox -s lock` does; a lane's own index for its torch).
Reads only: without --propose nothing is written. --propose makes the matrix.yaml change for each new
SGLang, locks it and writes a patch, the proposal report (and with --branch a commit on a new branch);
--build also builds and verifies the new cells with `build --only` (watch/propose.py).
One watch at a time per checkout: a second one is refused (runs/watch.lock).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .. import arguments, log
from ..errors import ProposalError
from ..workspace import Workspace, checked_name

ABOUT = "releases newer than matrix.yaml holds (--json; --propose a change)"
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class Options:
    ws: Workspace
    env: Mapping[str, str]                  # the host's index settings
    run_id: str                             # the proposal's run
    json: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S    # how long one answer of the index may take
    propose: bool = False
    branch: str | None = None
    build: bool = False
    out: Path | None = None


def parse(argv: Sequence[str], ws: Workspace, env: Mapping[str, str]) -> Options:
    import uuid

    ap = argparse.ArgumentParser(prog="nox -s watch --", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the findings (and the proposal) as JSON on stdout")
    arguments.add_matrix(ap, ws)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help=f"how long one answer of the index may take (default {DEFAULT_TIMEOUT_S:g})")
    ap.add_argument("--propose", action="store_true",
                    help="write the matrix.yaml change for each new SGLang, lock it, and write the proposal report")
    ap.add_argument("--branch", metavar="NAME", help="with --propose: also commit it on a new branch NAME")
    ap.add_argument("--build", action="store_true",
                    help="with --propose: build and verify the new cells (`build --only NEW`)")
    ap.add_argument("--out", type=arguments.path_argument,
                    help="with --propose: where the proposal goes (default runs/RUN_ID)")
    ap.add_argument("--run-id", default="", help="name of the proposal's run (default: watch-TIME-RANDOM)")
    a = ap.parse_args(list(argv))
    if (a.branch or a.build or a.out) and not a.propose:
        ap.error("--branch, --build and --out go with --propose")
    if not a.timeout > 0:
        ap.error("--timeout takes a number of seconds above 0")
    run_id = checked_name(a.run_id or time.strftime("watch-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6], "run id")
    return Options(ws=dataclasses.replace(ws, matrix=a.matrix), env=dict(env), json=a.json, timeout_s=a.timeout,
                   propose=a.propose, branch=a.branch, build=a.build, out=a.out, run_id=run_id)


def run(options: Options) -> int:
    from .. import matrix as matrix_mod
    from ..lock.state import read_index
    from ..watch import news, propose

    stdout = sys.stdout
    with one_watch(options.ws.runs), contextlib.redirect_stdout(sys.stderr) if options.json else _nothing():
        matrix = matrix_mod.load(options.ws.matrix, options.env)
        # before the index is asked
        started = propose.snapshot(options.ws, options.branch) if options.propose else None
        indexes, shown = news.make_indexes(matrix, options.env, options.timeout_s)
        locked = {cid: entry.get("versions", {}) for cid, entry in read_index(options.ws.locks)["cells"].items()}
        with log.working("asking the package index"):
            findings = news.watch(matrix, indexes, locked, shown)
        if not options.json:
            for line in findings.lines():
                log.console.print(line, markup=False)
        result: dict[str, Any] = {"watch": findings.to_json()}
        if started is not None:
            made = propose.run(findings, matrix, started, propose.Request(
                ws=options.ws, run_id=options.run_id, out=options.out, branch=options.branch, build=options.build,
                env=options.env))
            result["proposal"] = made
    if options.json:
        _print_json(result, stdout)
    return 0


@contextlib.contextmanager
def one_watch(runs: Path) -> Iterator[None]:
    """Hold runs/watch.lock for the whole watch: a second watch of the same checkout is refused (flock: the
    lock goes with the process, so a watch killed by a signal leaves nothing to clean up)."""
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / "watch.lock"
    with path.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            msg = f"another watch of this checkout is running ({holder}; lock {path})"
            raise ProposalError(msg, hint="wait for it to finish (a proposal with --build takes as long as the "
                                          "build), then run the watch again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _print_json(result: dict[str, Any], stdout: TextIO) -> None:
    stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    stdout.flush()
