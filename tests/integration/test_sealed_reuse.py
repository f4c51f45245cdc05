"""The build reuses a saved verification only when a trusted verifier sealed that very record: with the real
CLI, pipeline, BuildKit, engine and probe on the tiny project (tests/integration/tinyproject.py). Anyone can
compute a cell's verification key, so a record that carries it, written or edited by hand, makes the build
verify again, and say why."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import docker
import pytest

from buildscripts import results
from buildscripts.results import RunResults, Verdict
from tests.integration import tinyimages, tinyproject


@pytest.fixture
def project(client: docker.DockerClient, tmp_path: Path) -> tinyproject.TinyProject:
    tinyimages.python_image(client)   # the project's base, which the tiny project builds on
    return tinyproject.make(tmp_path / "project", nonce=uuid.uuid4().hex[:10], build_s=0, import_s=0)


def build(project: tinyproject.TinyProject, run_id: str) -> tuple[RunResults, str]:
    done = subprocess.run(project.argv("build", "--runs", str(project.runs), "--run-id", run_id, "--stages",
                                       "facts,import"), cwd=project.root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return results.load(project.results(run_id)), " ".join((done.stdout + done.stderr).split())


def forge(path: Path, how: str) -> None:
    """Edit the saved record as a hand would: drop its seal, or change a stage and keep the seal."""
    data = json.loads(path.read_text())
    (cell,) = data["cells"]
    if how == "unsealed":
        cell["seal"] = None
    else:
        cell["stages"][0]["duration_s"] += 1.0
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["unsealed", "edited"])
def test_a_forged_record_with_the_right_key_is_verified_again(project: tinyproject.TinyProject, how: str) -> None:
    first, _ = build(project, "first")
    (cell,) = first.cells
    assert cell.verdict is Verdict.EXPECTED_FAILURE and cell.seal is not None   # settled, sealed: reusable
    again, _ = build(project, "again")
    assert again.cells[0].reused_from is not None and again.cells[0].reused_from.startswith("run first ")

    for run_id in ("first", "again"):
        forge(project.results(run_id), how)
    third, said = build(project, "third")
    (verified_again,) = third.cells
    assert verified_again.reused_from is None
    assert verified_again.verification_key == cell.verification_key   # the key matched: only the seal failed
    assert verified_again.seal is not None and verified_again.verdict is Verdict.EXPECTED_FAILURE
    reason = "not sealed by a verifier" if how == "unsealed" else "changed after it was sealed"
    assert f"{reason}" in said and "not reused" in said
