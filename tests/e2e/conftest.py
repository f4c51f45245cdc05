"""The real cells of the e2e tier, built and verified once per session by `nox -s build`'s code path and
shared by every e2e module; the images this session made are removed at its end."""

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

from buildscripts.results import RunResults
from buildscripts.verify import gpus

ROOT = Path(__file__).resolve().parents[2]
CELLS = "sglang0.5.16-torch2.11.0-cu130-*"


@pytest.fixture(scope="session")
def gpu_in_containers() -> bool:
    """Whether this runner hands a GPU to containers: then the GPU stages must pass, else be skipped."""
    return gpus.discover(docker.from_env().info()).usable_in_containers


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs folder of this session's builds (the first is run `e2e`)."""
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def run(runs: Path) -> Iterator[RunResults]:
    client = docker.from_env()
    before = {str(i.id) for i in client.images.list()}
    tagged_before = {t for i in client.images.list() for t in i.tags}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "buildscripts", "build", "--only", CELLS, "--runs", str(runs), "--run-id", "e2e"],
            cwd=ROOT, capture_output=True, text=True, timeout=3600)
        print(done.stdout[-6000:], done.stderr[-3000:])
        assert done.returncode == 0, f"an unexpected outcome: {done.stderr[-2000:]}"
        yield RunResults.model_validate(json.loads((runs / "e2e" / "results.json").read_text()))
    finally:  # also after a failed build: what this run made goes, and only that (from its results)
        saved = runs / "e2e" / "results.json"
        cells = RunResults.model_validate(json.loads(saved.read_text())).cells if saved.is_file() else []
        # Already gone is as good (the session's own clean-up removes what carries its owner label too).
        for ref in {t for c in cells for t in c.tags} - tagged_before:  # good tags this run applied
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(ref, force=True)
        for made in {c.image.id for c in cells if c.image.id} - before:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(made, force=True)
