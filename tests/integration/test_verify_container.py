"""verify_image against real containers of tiny images: bad input gives a clear result per cell,
the run goes on, and no container is left behind."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildscripts.results import StageResult, Status
from buildscripts.verify import container, ladder
from buildscripts.verify.plan import Plan, grace
from tests.integration import tinyimages

HANG = b"import time\ntime.sleep(10 ** 6)\n"   # a module whose import never returns
CPU_STAGES = ["facts", "import", "flavour", "arch-audit", "toolchain", "jit-compile"]


@pytest.fixture(scope="module")
def py_image(client: docker.DockerClient) -> str:
    return tinyimages.python_image(client)


@pytest.fixture
def run_id(client: docker.DockerClient) -> Iterator[str]:
    rid = f"test-{uuid.uuid4().hex[:8]}"
    yield rid
    assert container.leftovers(client, rid) == [], "a verification container was left behind"


def verify_image(client: docker.DockerClient, image: str, *, archs: list[str], lane_cuda: str | None, logs: Path,
                 run_id: str, cell_id: str = "adhoc", stages: list[str] | None = None, stage_timeout: float = 900,
                 keep: bool = False) -> list[StageResult]:
    plan = Plan.make(archs=archs, lane_cuda=lane_cuda, stages=stages, stage_timeout=stage_timeout)
    return ladder.verify_image(client, image, plan, log_file=logs / cell_id / "probe.log", run_id=run_id,
                               cell_id=cell_id, keep=keep)


@pytest.fixture
def made(client: docker.DockerClient) -> Iterator[list[str]]:
    images: list[str] = []
    yield images
    for tag in images:
        client.images.remove(tag, force=True)


def test_missing_image_is_one_failed_stage(client: docker.DockerClient, tmp_path: Path, run_id: str) -> None:
    stages = verify_image(client, "sglang-images-test/absent:nothing", archs=["sm_90a"], lane_cuda="13.0",
                                 logs=tmp_path, run_id=run_id)
    assert [(s.name, s.status, s.failure_class) for s in stages] == [("image", Status.FAILED, "image-missing")]
    assert stages[0].hint and "build" in stages[0].hint


def test_image_without_python(client: docker.DockerClient, made: list[str], tmp_path: Path, run_id: str) -> None:
    made.append(tinyimages.no_python_image(client))
    stages = verify_image(client, made[0], archs=["sm_90a"], lane_cuda="13.0", logs=tmp_path, run_id=run_id,
                                 cell_id="nopython")
    assert len(stages) == 1 and stages[0].status is Status.FAILED
    assert stages[0].failure_class == "no-python"
    assert "python3" in (stages[0].reason or "")


def test_cpu_ladder_on_an_image_without_sglang(client: docker.DockerClient, py_image: str, tmp_path: Path,
                                               run_id: str) -> None:
    started = time.monotonic()
    stages = {s.name: s for s in verify_image(client, py_image, archs=["sm_90a", "sm_120a"], lane_cuda="13.0",
                                                     logs=tmp_path, run_id=run_id, cell_id="bare")}
    assert time.monotonic() - started < 90
    assert list(stages)[:6] == CPU_STAGES
    facts = stages["facts"]
    assert facts.status is Status.PASSED and facts.evidence["python"]["version"].startswith("3.11")
    assert facts.evidence["image"]["size_bytes"] > 10_000_000
    assert stages["import"].failure_class == "required-module-missing"
    assert stages["import"].evidence["modules"]["deep_gemm"] == "absent: not installed"
    assert stages["flavour"].status is Status.ABORTED and "import:torch" in (stages["flavour"].reason or "")
    assert stages["toolchain"].failure_class == "cuda-home-missing"
    assert stages["jit-compile"].failure_class == "cuda-home-missing"
    assert all(stages[g].status is Status.SKIPPED for g in ("gpu-visible", "server"))
    log = (tmp_path / "bare" / "probe.log").read_text()
    assert "docker exec" in log and "@@probe-result" in log


def test_a_hanging_import_times_out_inside_the_probe(client: docker.DockerClient, py_image: str,
                                                     made: list[str], tmp_path: Path, run_id: str) -> None:
    made.append(tinyimages.derive(client, py_image, {"/usr/lib/python3/dist-packages/torch/__init__.py": HANG,
                                                     "/usr/lib/python3/dist-packages/sglang/__init__.py": b""}))
    stages = verify_image(client, made[0], archs=["sm_90a"], lane_cuda="13.0", logs=tmp_path, run_id=run_id,
                                 stages=["facts", "import", "flavour"], stage_timeout=5)
    status = {s.name: s for s in stages}
    assert status["import"].failure_class == "probe-timeout"
    assert "torch" in (status["import"].reason or "") and "timed out" in (status["import"].reason or "")
    assert status["flavour"].status is Status.ABORTED


def test_a_hung_stage_is_ended_by_the_host(client: docker.DockerClient, py_image: str, made: list[str],
                                           tmp_path: Path, run_id: str) -> None:
    # Reading /etc/os-release blocks forever when it is a named pipe: the facts stage hangs in the probe.
    made.append(tinyimages.derive(client, py_image, {"/etc/os-release": tinyimages.FIFO}))
    started = time.monotonic()
    stages = verify_image(client, made[0], archs=["sm_90a"], lane_cuda="13.0", logs=tmp_path, run_id=run_id,
                                 stages=["facts", "import"], stage_timeout=3)
    assert time.monotonic() - started < 3 + grace(3) + 30
    assert [(s.name, s.status) for s in stages] == [("facts", Status.FAILED), ("import", Status.ABORTED)]
    assert stages[0].failure_class == "probe-timeout"


def test_a_container_killed_mid_stage(client: docker.DockerClient, py_image: str, made: list[str],
                                      tmp_path: Path, run_id: str) -> None:
    made.append(tinyimages.derive(client, py_image, {"/usr/lib/python3/dist-packages/torch/__init__.py": HANG}))
    log = tmp_path / "killed" / "probe.log"

    def kill_after_facts() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and '"name": "facts"' in log.read_text():
                for found in client.containers.list(filters={"label": f"{container.LABEL_RUN}={run_id}"}):
                    found.kill()
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_after_facts)
    killer.start()
    stages = verify_image(client, made[0], archs=["sm_90a"], lane_cuda="13.0", logs=tmp_path, run_id=run_id,
                                 cell_id="killed", stages=["facts", "import", "flavour"], stage_timeout=120)
    killer.join()
    assert [(s.name, s.status) for s in stages] == [
        ("facts", Status.PASSED), ("import", Status.FAILED), ("flavour", Status.ABORTED)]
    assert stages[1].failure_class == "container-died"
    assert "137" in (stages[1].reason or "")


def test_containers_are_labelled_and_kept_on_request(client: docker.DockerClient, py_image: str,
                                                     tmp_path: Path) -> None:
    rid = f"test-keep-{uuid.uuid4().hex[:6]}"
    try:
        verify_image(client, py_image, archs=["sm_90a"], lane_cuda=None, logs=tmp_path, run_id=rid,
                     stages=["facts"], keep=True)
        kept = container.leftovers(client, rid)
        assert len(kept) == 1 and kept[0].startswith("sglang-images-adhoc-")
    finally:
        for found in client.containers.list(all=True, filters={"label": f"{container.LABEL_RUN}={rid}"}):
            found.remove(force=True)
