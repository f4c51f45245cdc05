"""End to end on an x86_64 machine: the real linux/arm64 cell (SGLang 0.5.23, pip toolkit) built through
`nox -s build`'s code path, its wheels installed natively and the rest under QEMU user emulation, then its CPU
ladder run in the arm64 image under emulation: the record says "under emulation" on every stage that ran and
names the platforms; every GPU stage is SKIPPED with the reason (no arm64 GPU here), never passed; the image is
an arm64 image whose audited libraries are aarch64.

Cold: about 20 minutes and 20 GB on a 2-core machine (docs/platforms.md); on an arm64 machine nothing is emulated
and the test is skipped (its claims are about emulation). The image goes at the end; the arm64 base stays, as
the amd64 one does, until the session's clean-up (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from buildscripts.build import emulation
from buildscripts.matrix import platforms
from buildscripts.results import CPU_STAGES, CellResult, RunResults, Status

ROOT = Path(__file__).resolve().parents[2]
ARM64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"
GPU_STAGES = ("gpu-visible", "kernel-smoke", "server", "first-generation")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def arm64(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CellResult]:
    arm = platforms.by_oci("linux/arm64")
    if not emulation.needed(arm):  # CI may skip: on an arm64 runner nothing is emulated
        pytest.skip("this machine is arm64: nothing is emulated here")
    problem = emulation.handler_problem(arm)
    if problem:  # CI may skip: a runner without QEMU's handler builds no arm64 cell
        pytest.skip(f"no QEMU user emulation here ({problem}): `python -m buildscripts setup --for build`")
    runs = tmp_path_factory.mktemp("runs")
    client = docker.from_env()
    before = {str(i.id) for i in client.images.list()}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "buildscripts", "build", "--only", ARM64, "--runs", str(runs), "--run-id", "arm64"],
            cwd=ROOT, capture_output=True, text=True, timeout=5400)
        print(done.stdout[-6000:], done.stderr[-3000:])
        assert done.returncode == 0, f"an unexpected outcome: {done.stderr[-2000:]}"
        run = RunResults.model_validate(json.loads((runs / "arm64" / "results.json").read_text()))
        found = run.cell(ARM64)
        assert found is not None, [c.cell_id for c in run.cells]
        yield found
    finally:
        saved = runs / "arm64" / "results.json"
        cells = RunResults.model_validate(json.loads(saved.read_text())).cells if saved.is_file() else []
        for made in {c.image.id for c in cells if c.image.id} - before:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(made, force=True)


def test_the_arm64_image_is_arm64_and_its_cpu_stages_ran_under_emulation(arm64: CellResult) -> None:
    assert arm64.build is not None and arm64.build.status is Status.PASSED, arm64.build
    assert "first server start compiles" in (arm64.build.reason or ""), arm64.build.reason
    assert arm64.image.labels.get("io.sglang-images.platform") == "linux/arm64"
    facts = arm64.stage("facts")
    assert facts is not None and facts.evidence["emulation"]["platform"] == "linux/arm64"
    ran = [s for s in arm64.stages if s.name in CPU_STAGES and s.status in (Status.PASSED, Status.FAILED)]
    assert ran, arm64.stages
    for stage in ran:
        assert "under emulation" in stage.where, (stage.name, stage.where)
    for name in ("import", "flavour", "toolchain", "jit-compile"):
        passed = arm64.stage(name)
        assert passed is not None and passed.status is Status.PASSED, (name, passed)


def test_gpu_stages_are_skipped_with_the_reason(arm64: CellResult) -> None:
    for name in GPU_STAGES:
        stage = arm64.stage(name)
        assert stage is not None and stage.status is Status.SKIPPED, (name, stage)
        assert "no linux/arm64 GPU here" in (stage.reason or ""), (name, stage.reason)
    assert arm64.verdict.value != "verified"
