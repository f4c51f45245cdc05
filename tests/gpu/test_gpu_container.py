"""The GPU tier on a runner whose Docker engine hands GPUs to containers (nvidia runtime or CDI): a real
cell is built and verified by `nox -s build`'s code, the server and the first generation running inside
the container on the GPU. Nothing of SGLang is needed in this Python. Skipped elsewhere, with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildscripts.results import GPU_STAGES, RunResults, Status, Verdict
from buildscripts.verify import gpus

ROOT = Path(__file__).resolve().parents[2]
PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


def _why_not() -> str | None:
    try:
        client = docker.from_env()
        found = gpus.discover(client.info())
    except docker.errors.DockerException as exc:
        return f"no Docker engine: {exc}"
    return None if found.usable_in_containers else f"no GPU for containers: {found.summary()}"


# CI may skip this: the GPU tier runs on a runner whose engine hands GPUs to containers; CI's CPU runners have
# none by design (docs/ci.md: the GPU jobs are `nox -s verify`). Not a missing tool of CI's.
pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "")


@pytest.fixture
def verified(tmp_path: Path) -> Iterator[RunResults]:
    client = docker.from_env()
    before = {t for i in client.images.list() for t in i.tags}
    done = subprocess.run([sys.executable, "-m", "buildscripts", "build", "--only", PIP, "--runs", str(tmp_path),
                           "--run-id", "gpu"], cwd=ROOT, capture_output=True, text=True, timeout=5400)
    print(done.stdout[-6000:], done.stderr[-3000:])
    run = RunResults.model_validate(json.loads((tmp_path / "gpu" / "results.json").read_text()))
    yield run
    for ref in {t for c in run.cells for t in c.tags} - before:
        client.images.remove(ref, force=True)


def test_the_pip_cell_is_verified_in_a_container_on_the_gpu(verified: RunResults) -> None:
    cell = verified.cell(PIP)
    assert cell is not None
    for name in GPU_STAGES:
        stage = cell.stage(name)
        assert stage is not None and stage.status is Status.PASSED, stage
        assert stage.gpu and stage.arch and stage.where.startswith("container: ")
    assert cell.verdict is Verdict.VERIFIED, cell.verdict_reason
    assert any(t.endswith("-verified-" + cell.stage("gpu-visible").arch.replace("_", "")) for t in cell.tags)  # type: ignore[union-attr]
