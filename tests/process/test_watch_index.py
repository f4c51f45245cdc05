"""`python -m buildscripts watch` as a user runs it, against a package index served on the loopback: a folder
of tiny wheels whose metadata is real (tests/local_index.py), including a made-up sglang 0.5.24 made from
0.5.23's. Each test runs in a copy of the project (a git repository of its own, tests/watch_project.py), so
that nothing is written to this checkout. The proposal itself, whose lock needs the real index for SGLang's
dependencies, is tests/integration/test_watch_proposal.py.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local_index import TORCH_TAG, Release, free_port, made_up, real, served, write
from tests.watch_project import git, project, watch

FAKE_SERVER = Path(__file__).with_name("fake_server.py")
SGLANG = real("sglang", "0.5.23")


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
                               "cp313-manylinux_2_34_x86_64; base bookworm-arm64: no wheel for cp311 on "
                               "aarch64-manylinux_2_36; there are: cp313-manylinux_2_34_x86_64"),
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


def test_a_release_pinning_a_torch_of_a_new_cuda_flavour_is_proposed_with_the_flavour(tmp_path: Path) -> None:
    """torch 2.15.0 is CUDA 13.2 (its metadata pins cuda-toolkit 13.2.2), which matrix.yaml does not declare: an
    SGLang pinning it is proposable, with its lane and the flavour (the edit itself: tests/unit/test_watch.py)."""
    write(tmp_path / "index", [
        *(Release("sglang", v, made_up(SGLANG, v)) for v in ("0.5.10", "0.5.16", "0.5.23")),
        Release("sglang", "0.5.24", made_up(SGLANG, "0.5.24", torch="torch==2.15.0")),
        Release("torch", "2.14.1", real("torch", "2.14.1"), TORCH_TAG),
        Release("torch", "2.15.0", real("torch", "2.15.0"), TORCH_TAG, pep658=False),
    ])
    copy = project(tmp_path)
    with served(tmp_path / "index") as url:
        done = watch(copy, "--json", env={"PIP_INDEX_URL": url})
        plain = watch(copy, env={"PIP_INDEX_URL": url})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["watch"]
    (new,) = found["sglang"]
    assert (new["torch"], new["problem"], new["new_lane"], new["new_flavour"]) == (
        "2.15.0", None, {"torch": "2.15.0", "cuda": "cu132"}, {"name": "cu132", "version": "13.2", "toolkit": "13.2.2"})
    assert found["proposable"] == ["0.5.24"]
    assert plain.returncode == 0, plain.stderr
    assert ("new sglang 0.5.24: pins torch 2.15.0 (cu132: it requires cuda-toolkit==13.2.2), which no lane has: a new "
            "lane torch2.15.0-cu132, in a new CUDA flavour cu132 (CUDA 13.2)") in plain.stdout
    assert "new torch 2.15.0 (cu132: it requires cuda-toolkit==13.2.2): pinned by sglang 0.5.24: a new lane is " \
           "proposed for it, in the new CUDA flavour cu132" in plain.stdout
    assert git(copy, "status", "--porcelain") == ""


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
