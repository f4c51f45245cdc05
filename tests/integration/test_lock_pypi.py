"""Locking real cells against the real package index (PyPI or the host's mirror): no Docker needed.

Only metadata is resolved (no wheels are downloaded), so each test takes seconds with a warm uv
cache. Without network access they are skipped with the reason, except under CI=true, where that
is an error (a green CI must not hide skipped work).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildscripts import lock
from buildscripts import matrix as matrix_mod
from buildscripts.errors import LockError
from buildscripts.lock import lockfile
from buildscripts.lock.resolver import Target, compile_requirements
from buildscripts.workspace import Workspace
from tests import needs
from tests.lock_matrix import matrix_text, pip_toolkit

PIP_TOOLKIT = pip_toolkit()
# Fail fast on an unreachable index instead of retrying (the unreachable-index test relies on it).
ENV = {**os.environ, "UV_HTTP_RETRIES": "0"}


@pytest.fixture(scope="module", autouse=True)
def package_index() -> None:
    probe = compile_requirements(["six==1.17.0"], Target("3.11", "x86_64-manylinux_2_36"), env=ENV)
    if probe.ok:
        return
    needs.unavailable("the package index", f"it is not reachable: {probe.error}")


def write_matrix(root: Path, lanes: str, sglang: str, extra: str = "") -> matrix_mod.Matrix:
    path = root / "matrix.yaml"
    path.write_text(matrix_text(lanes, sglang, extra))
    return matrix_mod.load(path, {})


def lock_all(matrix: matrix_mod.Matrix, root: Path) -> dict[str, lock.LockStatus]:
    return lock.lock_cells(matrix, list(matrix.buildable()), Workspace.at(root), env=ENV, prune=True)


def test_torch_291_is_cu128_and_torch_211_is_cu130(tmp_path: Path) -> None:
    matrix = write_matrix(
        tmp_path, "  - {torch: 2.9.1, cuda: cu128}\n  - {torch: 2.11.0, cuda: cu130}",
        "  - {version: 0.5.10, torch: 2.9.1}\n  - {version: 0.5.16, torch: 2.11.0}", PIP_TOOLKIT,
    )
    results = lock_all(matrix, tmp_path)
    assert {cid: s.state for cid, s in results.items()} == {c.id: "ok" for c in matrix.buildable()}
    by_id = {c.id: c for c in matrix.buildable()}
    v128 = results["sglang0.5.10-torch2.9.1-cu128-pip-bookworm"].versions
    assert (v128["torch"], v128["cuda"], v128["sglang"]) == ("2.9.1", "cu128", "0.5.10")
    assert v128["nvcc"].startswith("12.8.")
    v130 = results["sglang0.5.16-torch2.11.0-cu130-pip-bookworm"].versions
    assert (v130["torch"], v130["cuda"], v130["sglang"]) == ("2.11.0", "cu130", "0.5.16")
    assert v130["nvcc"].startswith("13.0.")
    # SGLang's dependencies would drag nvcc 13.5 in; the SGLang lock holds it on the lane's 13.0, so the
    # none cell has that compiler too and the toolkit lock pins every component the SGLang layer has
    # at the very same version (its layer installs no second compiler).
    assert results["sglang0.5.16-torch2.11.0-cu130-none-bookworm"].versions["nvcc"] == v130["nvcc"]
    pip130 = by_id["sglang0.5.16-torch2.11.0-cu130-pip-bookworm"]
    paths130 = lock.paths_for(pip130, tmp_path / "lockfiles")
    assert paths130.toolkit is not None
    below, toolkit = lockfile.verify(paths130.sglang).pins, lockfile.verify(paths130.toolkit).pins
    assert {n: pin.version for n, pin in toolkit.items() if below.get(n) != pin} == {}
    for cell_id, cell in by_id.items():
        paths = lock.paths_for(cell, tmp_path / "lockfiles")
        lane, sglang = lockfile.verify(paths.lane), lockfile.verify(paths.sglang)
        # the SGLang lock holds the whole torch layer at the same versions and hashes
        assert all(sglang.pins.get(name) == pin for name, pin in lane.pins.items()), cell_id
        assert lock.status_of(matrix, cell, tmp_path / "lockfiles").state == "ok"
    lock.check(matrix, list(matrix.buildable()), Workspace.at(tmp_path))

    before = {p: p.read_bytes() for p in (tmp_path / "lockfiles").rglob("*.*")}
    lock_all(matrix, tmp_path)
    assert {p: p.read_bytes() for p in (tmp_path / "lockfiles").rglob("*.*")} == before

    # the same cells in another matrix.yaml (another toolkit recipe): `--check` names the stale cell
    other = write_matrix(
        tmp_path, "  - {torch: 2.9.1, cuda: cu128}\n  - {torch: 2.11.0, cuda: cu130}",
        "  - {version: 0.5.10, torch: 2.9.1}\n  - {version: 0.5.16, torch: 2.11.0}",
        PIP_TOOLKIT.replace("==13.0.2", "==13.0.1"),
    )
    stale = r"(?s)1 of 4 cell\(s\).*sglang0\.5\.16-torch2\.11\.0-cu130-pip-bookworm \(stale: "
    with pytest.raises(LockError, match=stale + r"locked from other inputs \(another matrix\.yaml\?\)"):
        lock.check(other, list(other.buildable()), Workspace.at(tmp_path))


def test_cu128_declared_with_torch_211_is_refused(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, "  - {torch: 2.11.0, cuda: cu128}",
                          "  - {version: 0.5.16, torch: 2.11.0}")
    (status,) = lock_all(matrix, tmp_path).values()
    assert status.state == "incompatible"
    assert status.reason is not None
    assert "torch 2.11.0 comes with the CUDA 13.0 runtime" in status.reason
    assert "declares cu128 (CUDA 12.8)" in status.reason
    assert not list((tmp_path / "lockfiles").rglob("*.txt"))


def test_bad_inputs_are_named_and_other_cells_continue(tmp_path: Path) -> None:
    lanes = ("  - {torch: 2.9.1, cuda: cu128, index: 'https://nonexistent.invalid/simple'}\n"
             "  - {torch: 2.11.0, cuda: cu130}")
    # 0.5.10 declared with the wrong torch (it pins 2.9.1: the lock reads that from SGLang's own metadata)
    sglang = ("  - {version: 0.5.9, torch: 2.9.1}\n  - {version: 0.5.10, torch: 2.11.0}\n"
              "  - {version: 99.0.0, torch: 2.11.0}")
    matrix = write_matrix(tmp_path, lanes, sglang)
    results = {cid.removesuffix("-none-bookworm"): s for cid, s in lock_all(matrix, tmp_path).items()}
    down = results["sglang0.5.9-torch2.9.1-cu128"]
    assert down.state == "unresolvable"
    assert "index https://nonexistent.invalid/simple cannot be reached" in (down.reason or "")
    pinned = results["sglang0.5.10-torch2.11.0-cu130"]
    assert pinned.state == "incompatible"
    assert "sglang 0.5.10 pins torch 2.9.1" in (pinned.reason or "")
    unknown = results["sglang99.0.0-torch2.11.0-cu130"]
    assert unknown.state == "unresolvable"
    assert "sglang==99.0.0" in (unknown.reason or "")
    # the lane itself was locked (from torch alone: none of its SGLang versions fits it)
    assert (tmp_path / "lockfiles/lanes/torch2.11.0-cu130-bookworm.txt").is_file()


def test_a_lock_with_an_altered_wheel_hash_does_not_install(tmp_path: Path) -> None:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    done = compile_requirements(["six==1.17.0"], Target(python, "x86_64-manylinux_2_36"), env=ENV)
    assert done.ok, done.error
    good = tmp_path / "good.txt"
    lockfile.write(good, lockfile.Lockfile(header={"layer": "test", "inputs-sha256": "-"}, body=done.body))
    # the hash of six-1.17.0-py2.py3-none-any.whl
    wheel_hash = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
    assert wheel_hash in done.body
    bad = tmp_path / "bad.txt"
    bad.write_text(good.read_text().replace(wheel_hash, wheel_hash[::-1]))
    with pytest.raises(LockError, match="edited by hand"):
        lockfile.verify(bad)  # caught before any build starts

    def install(lock_path: Path) -> subprocess.CompletedProcess[str]:
        target = tmp_path / f"site-{lock_path.stem}"
        # --no-build: otherwise uv quietly falls back to the sdist whose hash still matches
        argv = ["uv", "pip", "install", "--require-hashes", "--no-deps", "--no-build", "-r", str(lock_path),
                "--target", str(target), "--python", sys.executable]
        return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300, check=False)

    assert install(good).returncode == 0
    refused = install(bad)
    assert refused.returncode != 0
    assert "Hash mismatch for `six==1.17.0`" in refused.stderr
