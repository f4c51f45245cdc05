"""`python -m buildscripts watch` as a user runs it, against a package index served on the loopback: a folder
of tiny wheels whose metadata is real (tests/local_index.py), including a made-up sglang 0.5.24 made from
0.5.23's. Each test runs in a copy of the project (a git repository of its own), so that nothing is written
to this checkout. The proposal's lock also needs the real index for SGLang's dependencies: that test is
skipped without it (a failure under CI=true). No Docker: the proposal's build step is not run here
(tests/unit/test_watch.py checks that it is the `build --only NEW` command).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildscripts.lock.resolver import Target, compile_requirements
from tests import needs
from tests.local_index import TORCH_TAG, Release, free_port, made_up, real, served, write

ROOT = Path(__file__).resolve().parents[2]
FAKE_SERVER = Path(__file__).with_name("fake_server.py")
SGLANG = real("sglang", "0.5.23")
NEW = ("sglang0.5.24-torch2.14.1-cu130-none-bookworm", "sglang0.5.24-torch2.14.1-cu130-pip-bookworm")


def project(tmp: Path) -> Path:
    """A copy of the project with its own git history (one commit), as a clone would be."""
    copy = tmp / "project"
    for folder in ("buildscripts", "images", "lockfiles"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("matrix.yaml", "pyproject.toml", ".gitignore"):
        shutil.copy(ROOT / name, copy / name)
    git(copy, "init", "-q", "-b", "main")
    git(copy, "add", "-A")
    git(copy, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "the project")
    return copy


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def watch(copy: Path, *args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("UV_INDEX", "UV_DEFAULT_INDEX", "PIP_INDEX",
                                                                          "PIP_EXTRA_INDEX"))}
    return subprocess.run([sys.executable, "-m", "buildscripts", "watch", *args], cwd=copy, capture_output=True,
                          text=True, env={**clean, "PYTHONPATH": str(copy), "NO_COLOR": "1", **env}, timeout=timeout)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    releases = [
        *(Release("sglang", v, made_up(SGLANG, v)) for v in ("0.5.10", "0.5.16", "0.5.23")),
        Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24"), pep658=False),   # read from the wheel itself
        Release("sglang", "0.5.25", made_up(SGLANG, "0.5.25"), yanked="the kernels crash at start"),
        Release("sglang", "0.5.26", made_up(SGLANG, "0.5.26", torch="torch>=2.14"),),
        Release("sglang", "0.5.27", made_up(SGLANG, "0.5.27"), tags="cp313-cp313-manylinux_2_34_x86_64"),
        Release("torch", "2.14.1", real("torch", "2.14.1"), TORCH_TAG),
        Release("torch", "2.15.0", real("torch", "2.15.0"), TORCH_TAG),
    ]
    write(tmp_path / "index", releases)
    with served(tmp_path / "index") as url:
        yield url


def test_the_watch_reports_what_the_local_index_holds(tmp_path: Path, index: str) -> None:
    copy = project(tmp_path)
    done = watch(copy, "--json", env={"PIP_INDEX_URL": index})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["watch"]
    assert [(s["version"], s["torch"], s["lane"], s["problem"]) for s in found["sglang"]] == [
        ("0.5.24", "2.14.1", "torch2.14.1-cu130", None),
        ("0.5.26", None, None, "its metadata asks for `torch>=2.14`, not one torch version "
                               "(sglang-0.5.26-cp311-cp311-manylinux_2_34_x86_64.whl): no lane can be chosen for it"),
        ("0.5.27", None, None, "base bookworm: no wheel for cp311 on x86_64-manylinux_2_36; there are: "
                               "cp313-manylinux_2_34_x86_64"),
    ]
    assert found["skipped"] == [{"package": "sglang", "version": "0.5.25",
                                 "reason": "yanked (the kernels crash at start)"}]
    assert [(t["version"], t["cuda"], t["pinned_by"]) for t in found["torch"]] == [("2.15.0", "cu132", [])]
    assert found["proposable"] == ["0.5.24"]
    plain = watch(copy, env={"PIP_INDEX_URL": index})
    assert plain.returncode == 0, plain.stderr
    assert "new sglang 0.5.24: pins torch 2.14.1, which lane torch2.14.1-cu130 has" in plain.stdout
    assert "no SGLang release pins it yet (the newest that pins one, sglang 0.5.24, pins torch 2.14.1)" in plain.stdout
    assert git(copy, "status", "--porcelain") == ""   # a watch writes nothing


def test_an_unreachable_index_is_a_clear_error_and_nothing_is_written(tmp_path: Path) -> None:
    copy = project(tmp_path)
    done = watch(copy, "--propose", env={"PIP_INDEX_URL": f"http://127.0.0.1:{free_port()}/simple"})
    assert done.returncode == 16
    assert "error: the package index cannot be reached: http://127.0.0.1:" in done.stderr
    assert "hint: check the host's pip index settings" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in (copy / "runs").iterdir()) == ["watch.lock"]
    assert git(copy, "status", "--porcelain") == "" and git(copy, "branch", "--list") == "* main\n"


def test_an_index_that_never_answers_times_out(tmp_path: Path) -> None:
    copy = project(tmp_path)
    port = free_port()
    server = subprocess.Popen([sys.executable, str(FAKE_SERVER), "hang", str(port)], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None and server.stdout.readline()  # it prints once it listens
        done = watch(copy, "--timeout", "1", env={"PIP_INDEX_URL": f"http://127.0.0.1:{port}/simple"}, timeout=60)
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    assert done.returncode == 16
    assert f"the package index did not answer within 1 s: http://127.0.0.1:{port}/simple/sglang/" in done.stderr


def test_a_second_watch_is_refused(tmp_path: Path, index: str) -> None:
    copy = project(tmp_path)
    (copy / "runs").mkdir()
    with (copy / "runs" / "watch.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 1, started earlier\n")
        held.flush()
        done = watch(copy, env={"PIP_INDEX_URL": index})
    assert done.returncode == 17
    assert "another watch of this checkout is running (pid 1, started earlier" in done.stderr


def test_a_proposal_refuses_uncommitted_matrix_edits(tmp_path: Path, index: str) -> None:
    copy = project(tmp_path)
    with (copy / "matrix.yaml").open("a") as fh:
        fh.write("# a hand edit, not committed\n")
    done = watch(copy, "--propose", env={"PIP_INDEX_URL": index})
    assert done.returncode == 17
    assert "matrix.yaml or lockfiles/ have changes that are not committed" in done.stderr
    assert "commit or stash them" in done.stderr
    assert not (copy / "runs").exists() or [p.name for p in (copy / "runs").iterdir()] == ["watch.lock"]


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
    assert states == dict.fromkeys(NEW, "ok")
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
    assert [c["id"] for c in json.loads(listing.stdout)] == list(NEW)
    # The patch is the same change, for `git apply` on the commit it was made from.
    fresh = tmp_path / "fresh"
    git(copy, "worktree", "add", "-q", "--detach", str(fresh), "main")
    git(fresh, "apply", "--check", str(out / "matrix.patch"))
