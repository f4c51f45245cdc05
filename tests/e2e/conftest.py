"""The real cells of the e2e tier, as `nox -s build` built and verified them, shared by every e2e module.

CI runs the main job (`nox -s build`, the whole default matrix) before the tests (.ci/run): its saved run under
runs/ already holds these cells, built and verified by the code path the tests would run again. When that record
is current (the images the cells' inputs give today, verified with today's probe, judges and plan: the same
verification key), the tier takes it instead of verifying the same images a second time. Elsewhere (no main job
run, or a tree changed since) the session builds and verifies them itself, once for the whole test run: under
pytest-xdist the first worker that asks builds, the others wait for it and read what it saved. What the session
built carries its owner label and goes at the end of the run (tests/conftest.py); good tags it applied go too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from buildscripts import matrix
from buildscripts.results import RunResults
from buildscripts.verify import gpus, provision, reuse
from buildscripts.verify.asked import Asked
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
CELLS = "sglang0.5.16-torch2.11.0-cu130-*"
CELL_IDS = ("sglang0.5.16-torch2.11.0-cu130-none-bookworm", "sglang0.5.16-torch2.11.0-cu130-pip-bookworm")
MAIN_RUNS = ROOT / "runs"   # where `nox -s build` saves its runs (buildscripts/workspace.py)


@pytest.fixture(scope="session")
def gpu_in_containers() -> bool:
    """Whether this runner hands a GPU to containers: then the GPU stages must pass, else be skipped."""
    return gpus.discover(docker.from_env().info()).usable_in_containers


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder of this worker's own."""
    return tmp_path_factory.mktemp("runs")


def buildscripts(*argv: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "buildscripts", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    print(done.stdout[-6000:], done.stderr[-3000:])
    return done


def current_images(runs: Path) -> dict[str, str]:
    """cell id -> the image its inputs give today: `build --no-verify`, which builds nothing when the main job's
    candidate tags exist (and otherwise builds what the session's own run then finds built)."""
    done = buildscripts("build", "--only", CELLS, "--no-verify", "--runs", str(runs), "--run-id", "current")
    assert done.returncode == 0, f"an unexpected outcome: {done.stderr[-2000:]}"
    found = RunResults.model_validate(json.loads((runs / "current" / "results.json").read_text()))
    return {c.cell_id: str(c.image.id) for c in found.cells if c.image.id}


def main_job_run(images: dict[str, str], saved: Path = MAIN_RUNS) -> RunResults | None:
    """The newest run under `saved` whose records of the e2e cells are current: of the images `images` names, with
    a settled outcome and the verification key a build would compute now (else it would verify them again)."""
    if set(images) != set(CELL_IDS) or not saved.is_dir():
        return None
    loaded = matrix.load(ROOT / "matrix.yaml", {})
    with contextlib.closing(docker.from_env()) as client:
        discovery = gpus.discover(client.info())
    profile = loaded.spec.profiles["default"]
    asked = Asked(ws=Workspace.at(ROOT), matrix=loaded)   # what a build asks by default
    wanted = {c.id: reuse.key(images[c.id], provision.plan(asked, profile, cell=c), discovery)
              for c in loaded.cells if c.id in images}
    for saved_run in reuse.saved_runs(saved):
        records = [saved_run.cell(cell_id) for cell_id in CELL_IDS]
        if all(r is not None and r.image.id == images[r.cell_id] and r.verification_key == wanted[r.cell_id]
               and r.verdict in reuse.SETTLED for r in records):
            return saved_run.model_copy(update={"cells": records})
    return None


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResults]:
    # The workers of one run share the folder above their own temporary folders (pytest-xdist's advice for a
    # session fixture made once): the lock makes one of them build while the others wait, then read its results.
    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared
    folder = shared / "e2e-run"
    folder.mkdir(exist_ok=True)
    saved, built_here = folder / "results.json", False
    with contextlib.closing(docker.from_env()) as client:
        tagged_before = {t for i in client.images.list() for t in i.tags}
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.exists():
            if (main := main_job_run(current_images(folder / "current"))) is not None:
                print(f"the e2e cells as the main job's run {main.run_id} verified them (nothing built, nothing "
                      "verified again)")
                saved.write_text(main.model_dump_json())
            else:
                done = buildscripts("build", "--only", CELLS, "--runs", str(folder), "--run-id", "e2e")
                assert done.returncode == 0, f"an unexpected outcome: {done.stderr[-2000:]}"
                saved.write_text((folder / "e2e" / "results.json").read_text())
                built_here = True
    found = RunResults.model_validate(json.loads(saved.read_text()))
    try:
        yield found
    finally:   # the good tags the session's own build applied (a GPU runner's); its images go with the run
        with contextlib.closing(docker.from_env()) as client:
            for ref in {t for c in found.cells for t in c.tags} - tagged_before if built_here else ():
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(ref, force=True)
