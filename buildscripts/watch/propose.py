"""`watch --propose`: the matrix.yaml change for the new SGLang releases, locked, optionally built, reported.

The steps, in order (`run`):
  snapshot  matrix.yaml as committed (a file with uncommitted changes is refused: the proposal is made on
            HEAD and would silently leave them out), before the index is asked;
  edit      the change as text (edit.py), validated like any matrix.yaml;
  tree      a scratch git worktree of HEAD under runs/, so that the checkout is never written to;
  lock      `lock` of the whole proposed matrix there (unchanged layers are reused, as `nox -s lock` does);
            an index that cannot be reached stops the proposal, nothing written;
  build     with --build, `python -m buildscripts build --only NEW...` in that tree: the project's own
            build and verify path, results under the checkout's runs/RUN_ID;
  write     only if matrix.yaml is still the file it was at the start (else refused, nothing written):
            OUT/matrix.patch (`git apply`-able), OUT/proposal.md and .json, and with --branch a commit.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import log, proc
from ..errors import PackageIndexError, ProposalError
from ..lock import lock_cells
from ..lock.state import read_index
from ..matrix import Matrix, load
from ..results import RunResults
from ..results.store import load as load_results
from ..workspace import Workspace
from . import edit, proposal
from .news import Findings

GIT_HINT = "install git; the proposal is made in a git worktree of the checkout"
BUILD_OK = (0, 10)  # 10: cells ended unexpectedly, which the report shows (errors.RunFailed)


@dataclass(frozen=True)
class Request:
    ws: Workspace
    run_id: str
    out: Path | None
    branch: str | None
    build: bool
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    repo: Path
    matrix: str          # its path inside the repository
    text: str
    sha256: str


def snapshot(ws: Workspace, branch: str | None = None) -> Snapshot:
    """matrix.yaml as the proposal starts from it; refused when it (or lockfiles/) has uncommitted changes."""
    repo = Path(_git(ws.root, "rev-parse", "--show-toplevel", what="find the git checkout").strip())
    if ws.matrix.resolve() != (ws.root / "matrix.yaml").resolve():
        msg = f"--propose changes the project's matrix.yaml ({ws.root / 'matrix.yaml'}), not {ws.matrix}"
        raise ProposalError(msg, hint="leave --matrix out with --propose")
    relative = str(ws.matrix.resolve().relative_to(repo))
    dirty = _git(repo, "status", "--porcelain", "--", relative, str(ws.locks.resolve().relative_to(repo)),
                 what="read the checkout's state").strip()
    if dirty:
        msg = f"matrix.yaml or lockfiles/ have changes that are not committed:\n  {dirty}"
        raise ProposalError(msg, hint="the proposal is made on the last commit and would leave them out: commit or "
                                      "stash them (`git stash`), then run the watch again")
    if branch:
        _check_branch(repo, branch)
    text = ws.matrix.read_text(encoding="utf-8")
    return Snapshot(repo, relative, text, _sha(text))


def run(findings: Findings, matrix: Matrix, start: Snapshot, request: Request) -> dict[str, Any]:
    """Make the proposal; return its record (also written as OUT/proposal.json)."""
    releases = findings.proposable()
    if not releases:
        listed = "; ".join(f"sglang {s.version}: {s.problem}" for s in findings.sglang)
        reason = f"no new SGLang can be proposed ({listed})" if listed else "no new SGLang release"
        log.info(f"proposal: nothing to propose: {reason}")
        return {"state": "nothing to propose", "reason": reason}
    change = edit.propose(start.text, matrix, releases)
    out = request.out or request.ws.runs / request.run_id
    if out.exists() and any(out.iterdir()):
        msg = f"the proposal's folder {out} exists and is not empty"
        raise ProposalError(msg, hint="pass another --out or --run-id")
    with _worktree(start.repo, request.ws.runs) as tree:
        (tree / start.matrix).write_text(change.text, encoding="utf-8")
        project = tree / request.ws.root.resolve().relative_to(start.repo)
        proposed = load(project / "matrix.yaml")
        _lock(proposed, Workspace.at(project, runs=request.ws.runs / request.run_id), request.env)
        new_ids = [c.id for c in change.new_cells]
        index = read_index(project / "lockfiles")["cells"]
        locks = {cid: index.get(cid, {}) for cid in new_ids}
        buildable = [c.id for c in change.new_cells if c.excluded is None and locks[c.id].get("state") == "ok"]
        built = _build(project, buildable, request) if request.build else None
        _git(tree, "add", "-A", what="stage the proposal")
        scratch = tree / ".watch.patch"  # git writes it whole (the locks make it thousands of lines)
        _git(tree, "diff", "--cached", "--binary", f"--output={scratch}", what="write the patch")
        changed = _git(tree, "diff", "--cached", "--name-status", what="list the changed files").splitlines()
        _unchanged_since(start, request.ws)
        made = proposal.Made(locks=locks, buildable=buildable, built=built, changed=changed,
                             today=read_index(request.ws.locks)["cells"])
        record = proposal.record(findings, change, made, matrix, request.ws, build_asked=request.build,
                                 branch=request.branch)
        out.mkdir(parents=True, exist_ok=True)
        shutil.move(scratch, out / "matrix.patch")
        (out / "proposal.md").write_text(proposal.markdown(record), encoding="utf-8")
        (out / "proposal.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if request.branch:
            _commit(tree, request.branch, record["title"])
    log.info(f"proposal: {record['title']}: {request.ws.shown(out / 'proposal.md')}, "
             f"{request.ws.shown(out / 'matrix.patch')}" + (f", branch {request.branch}" if request.branch else ""))
    return {**record, "out": str(out)}


# ---------------------------------------------------------------- steps


def _lock(proposed: Matrix, tree: Workspace, env: Mapping[str, str]) -> None:
    """Lock the proposed matrix in the tree, as `nox -s lock` would (its uv logs go to the run's folder);
    an index that cannot be reached stops the proposal here."""
    with log.group("lock the proposed matrix"):
        statuses = lock_cells(proposed, list(proposed.buildable()), tree, env=env, prune=True)
    unreachable = [f"{cid}: {s.reason}" for cid, s in statuses.items()
                   if s.state == "unresolvable" and "cannot be reached" in (s.reason or "")]
    if unreachable:
        msg = "the package index cannot be reached while locking the proposal:\n  " + "\n  ".join(unreachable)
        raise PackageIndexError(msg, hint="no proposal was written (uv's logs are in the run's lock/ folder); check "
                                          "the host's pip index settings and the network, then run the watch again")


def _build(project: Path, cells: list[str], request: Request) -> RunResults | None:
    """The new cells through the project's own `build --only` (build once, verify by digest, as everywhere)."""
    if not cells:
        return None
    argv = [sys.executable, "-m", "buildscripts", "build", "--run-id", request.run_id,
            "--runs", str(request.ws.runs.resolve())]
    for cell in cells:
        argv += ["--only", cell]
    build_log = request.ws.runs / request.run_id / "watch-build.log"
    with log.group(f"build and verify {len(cells)} new cell(s)"), log.working(f"building (log: {build_log})"):
        done = proc.run(argv, cwd=project, env={**request.env, "PYTHONPATH": str(project)}, log=build_log,
                        on_line=lambda line: log.console.print(line, markup=False, highlight=False))
    results = request.ws.runs / request.run_id / "results.json"
    if done.returncode not in BUILD_OK or not results.is_file():
        msg = f"the build of the new cells failed to run (exit {done.returncode}):\n{done.tail(15)}"
        raise ProposalError(msg, hint=f"no proposal was written; the build's log is {build_log}; run the watch "
                                      "with --propose but without --build to get the proposal alone")
    return load_results(results)


def _unchanged_since(start: Snapshot, ws: Workspace) -> None:
    now = ws.matrix.read_text(encoding="utf-8") if ws.matrix.is_file() else ""
    if _sha(now) != start.sha256:
        msg = (f"{ws.matrix} was changed while the proposal was made (sha256 {start.sha256[:12]} at the start, "
               f"{_sha(now)[:12]} now): the proposal was made from the old file, so none is written")
        raise ProposalError(msg, hint="commit the change, then run the watch again: it proposes on top of it")


def _commit(tree: Path, branch: str, title: str) -> None:
    identity = [] if _git(tree, "config", "user.email", what="", check=False).strip() else [
        "-c", "user.name=sglang-images watch", "-c", "user.email=watch@sglang-images.invalid"]
    _git(tree, "switch", "-c", branch, what=f"create the branch {branch}")
    _git(tree, *identity, "commit", "-q", "-m", title, what=f"commit the proposal on {branch}")


def _check_branch(repo: Path, branch: str) -> None:
    if _git(repo, "check-ref-format", "--branch", branch, what="", check=False) == "":
        msg = f"{branch!r} is not a valid branch name"
        raise ProposalError(msg, hint="e.g. --branch watch/sglang-0.5.24")
    if _git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", what="", check=False):
        msg = f"the branch {branch} exists already"
        raise ProposalError(msg, hint="pass another --branch, or delete it (`git branch -D BRANCH`) if it is an old "
                                      "proposal")


@contextmanager
def _worktree(repo: Path, runs: Path) -> Iterator[Path]:
    runs.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix=".watch-tree-", dir=runs))
    try:
        _git(repo, "worktree", "add", "--quiet", "--detach", str(tree), "HEAD", what="make a scratch worktree")
        yield tree
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree), what="", check=False)
        shutil.rmtree(tree, ignore_errors=True)
        _git(repo, "worktree", "prune", what="", check=False)


def _git(cwd: Path, *args: str, what: str, check: bool = True) -> str:
    """git's output (stdout and stderr), or "" when it fails and `check` is off."""
    done = proc.run([proc.which("git", hint=GIT_HINT), *args], cwd=cwd, timeout=300)
    if not done.ok and check:
        msg = f"git could not {what} in {cwd}: {done.tail(8).strip()[:500]}"
        raise ProposalError(msg, hint="the proposal needs a git checkout of the project (`git clone`), "
                                      "with HEAD on a commit")
    return done.output if done.ok else ""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
