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
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from .. import arguments, log
from .. import matrix as matrix_mod
from ..errors import ProposalError
from ..hostenv import ca_bundle, index_urls
from ..lock.state import read_index
from ..workspace import Workspace, checked_name, path_argument
from . import news, propose
from .index import Index, SimpleIndex

DEFAULT_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class Options:
    ws: Workspace
    json: bool
    timeout_s: float
    propose: bool
    branch: str | None
    build: bool
    out: Path | None
    run_id: str


def parse(argv: list[str], ws: Workspace) -> Options:
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
    ap.add_argument("--out", type=path_argument, help="with --propose: where the proposal goes (default runs/RUN_ID)")
    ap.add_argument("--run-id", default="", help="name of the proposal's run (default: watch-TIME-RANDOM)")
    a = ap.parse_args(argv)
    if (a.branch or a.build or a.out) and not a.propose:
        ap.error("--branch, --build and --out go with --propose")
    if not a.timeout > 0:
        ap.error("--timeout takes a number of seconds above 0")
    run_id = checked_name(a.run_id or time.strftime("watch-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6], "run id")
    return Options(ws=dataclasses.replace(ws, matrix=a.matrix), json=a.json, timeout_s=a.timeout,
                   propose=a.propose, branch=a.branch, build=a.build, out=a.out, run_id=run_id)


def main(argv: list[str], ws: Workspace | None = None, env: Mapping[str, str] | None = None) -> int:
    env = dict(env or {})
    opts = parse(argv, ws or Workspace.at())
    stdout = sys.stdout
    with one_watch(opts.ws.runs), contextlib.redirect_stdout(sys.stderr) if opts.json else _nothing():
        matrix = matrix_mod.load(opts.ws.matrix, env)
        started = propose.snapshot(opts.ws, opts.branch) if opts.propose else None  # before the index is asked
        indexes, shown = make_indexes(matrix, env, opts.timeout_s)
        locked = {cid: entry.get("versions", {}) for cid, entry in read_index(opts.ws.locks)["cells"].items()}
        with log.working("asking the package index"):
            findings = news.watch(matrix, indexes, locked, shown)
        if not opts.json:
            for line in findings.lines():
                log.console.print(line, markup=False)
        result: dict[str, Any] = {"watch": findings.to_json()}
        if started is not None:
            made = propose.run(findings, matrix, started, propose.Request(
                ws=opts.ws, run_id=opts.run_id, out=opts.out, branch=opts.branch, build=opts.build, env=env))
            result["proposal"] = made
    if opts.json:
        _print_json(result, stdout)
    return 0


def make_indexes(matrix: matrix_mod.Matrix, env: Mapping[str, str],
                 timeout_s: float) -> tuple[dict[str, Index], list[str]]:
    """The host's index (its pip settings, uv's order) and each lane's own; and how to name them."""
    host = index_urls(env)
    bundle = ca_bundle(env)
    merge = env.get("UV_INDEX_STRATEGY", "first-index").startswith("unsafe-")
    indexes: dict[str, Index] = {news.HOST: SimpleIndex(host, timeout_s=timeout_s, ca_bundle=bundle, merge=merge)}
    shown = [f"the host's package index ({(' + ' if merge else ' then ').join(host)})"]
    for lane in matrix.spec.torch_lanes:
        if lane.index and lane.index not in indexes:
            indexes[lane.index] = SimpleIndex([lane.index], timeout_s=timeout_s, ca_bundle=bundle)
            shown.append(f"lane {lane.id}'s index ({lane.index})")
    return indexes, shown


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
