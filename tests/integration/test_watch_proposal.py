"""`watch --propose` of a made-up SGLang release, as a user runs it in a copy of the project
(tests/watch_project.py): the made-up release comes from a package index on the loopback, every other
package from the real index, against which the proposal's lock resolves SGLang's dependencies (no Docker is
needed; the proposal's build step is not run here: tests/unit/test_watch.py checks that it is the
`build --only NEW` command).

Here, not in the process tier, because it needs the real package index and half a minute of `uv` resolving
two lanes' worth of SGLang's dependencies, as tests/integration/test_lock_pypi.py does. Without the index it
is skipped with the reason (a failure under CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from buildscripts.lock.resolver import Target, compile_requirements
from tests import needs
from tests.local_index import Release, made_up, real, served, write
from tests.watch_project import git, project, watch

SGLANG = real("sglang", "0.5.23")
NEW = ("sglang0.5.24-torch2.14.1-cu130-none-bookworm", "sglang0.5.24-torch2.14.1-cu130-pip-bookworm")


def test_the_proposal_of_a_made_up_release(tmp_path: Path) -> None:
    probe = compile_requirements(["six==1.17.0"], Target("3.11", "x86_64-manylinux_2_36"), env=dict(os.environ))
    if not probe.ok:
        needs.unavailable("the package index", f"the proposal's lock resolves SGLang's dependencies: {probe.error}")
    copy = project(tmp_path)
    matrix_before = (copy / "matrix.yaml").read_bytes()
    # Only the made-up release is local; the host's index has everything else. Both count for every package,
    # as uv does with UV_INDEX_STRATEGY=unsafe-best-match: sglang 0.5.23 and torch still come from the real
    # index, with the hashes the project's locks hold.
    write(tmp_path / "index", [Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24"))])
    with served(tmp_path / "index") as index:
        env = {"UV_INDEX": index, "UV_INDEX_STRATEGY": "unsafe-best-match"}
        done = watch(copy, "--propose", "--branch", "watch/sglang-0.5.24", "--run-id", "watch-test", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (copy / "matrix.yaml").read_bytes() == matrix_before and git(copy, "status", "--porcelain") == ""
    out = copy / "runs" / "watch-test"
    record = json.loads((out / "proposal.json").read_text())
    assert record["title"] == "watch: propose sglang 0.5.24 (torch 2.14.1)"
    assert record["added"] == ["sglang: {version: 0.5.24, torch: 2.14.1}"]
    states = {c["cell"]: c["lock"] for c in record["cells"] if not c["excluded"]}
    assert {cell: states.get(cell) for cell in NEW} == dict.fromkeys(NEW, "ok")
    # the opt-in arm64 cell is proposed too, with what its lock came to (the made-up release has no aarch64
    # dependencies of its own here, so it may not resolve): said, never hidden
    assert set(states) - set(NEW) <= {"sglang0.5.24-torch2.14.1-cu130-pip-bookworm-arm64"}
    report = (out / "proposal.md").read_text()
    assert "Nothing is promoted before this pull request merges" in report
    assert "sglang 0.5.23 → 0.5.24" in report
    assert record["build"]["state"] == "not built (run without --build)"
    # The branch holds the change and its locks; on it, the locks are current and `build --only NEW` selects
    # exactly the new cells (the matrix listing is that selection's dry run).
    branch = tmp_path / "branch"
    git(copy, "worktree", "add", "-q", str(branch), "watch/sglang-0.5.24")
    assert git(branch, "log", "-1", "--format=%s").strip() == record["title"]
    cli = [sys.executable, "-m", "buildscripts"]
    env_branch = {**os.environ, "PYTHONPATH": str(branch)}
    check = subprocess.run([*cli, "lock", "--check"], cwd=branch, capture_output=True, text=True, env=env_branch)
    assert check.returncode == 0, check.stdout + check.stderr
    listing = subprocess.run([*cli, "matrix", "--json", "--only", "sglang0.5.24-*"], cwd=branch,
                             capture_output=True, text=True, env=env_branch)
    arm64 = set(states) - set(NEW)   # an opt-in cell is selected when --only names it
    assert sorted(c["id"] for c in json.loads(listing.stdout)) == sorted({*NEW, *arm64})
    # The patch is the same change, for `git apply` on the commit it was made from.
    fresh = tmp_path / "fresh"
    git(copy, "worktree", "add", "-q", "--detach", str(fresh), "main")
    git(fresh, "apply", "--check", str(out / "matrix.patch"))
