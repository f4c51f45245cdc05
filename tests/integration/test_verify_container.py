"""verify_image against real containers of tiny images: bad input gives a clear result per cell,
the run goes on, and no container is left behind; what the ladder measures where it runs (/dev/shm) and
reads from an image's metadata (version-coupled packages)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from buildscripts.results import StageResult, Status
from buildscripts.verify import container, gpus, one_image
from buildscripts.verify.plan import Plan, grace
from tests.integration import tinyimages
from tests.verification import request

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
                 keep: bool = False, options: dict[str, Any] | None = None) -> list[StageResult]:
    plan = Plan.make(archs=archs, lane_cuda=lane_cuda, stages=stages, stage_timeout=stage_timeout)
    return one_image.verify_image(client, image, request(plan, logs / cell_id, cell_id=cell_id, run_id=run_id,
                                                         keep=keep, options=options))


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


# What the ladder measures where it runs and reads from the image's metadata.
SITE = "/usr/lib/python3/dist-packages"


def stages_of(client: docker.DockerClient, image: str, logs: Path, run_id: str, names: list[str],
              options: dict[str, Any] | None = None) -> dict[str, StageResult]:
    found = verify_image(client, image, archs=["sm_90a"], lane_cuda=None, logs=logs, run_id=run_id, stages=names,
                         stage_timeout=120, options=options)
    return {s.name: s for s in found}


def test_dockers_default_dev_shm_is_measured_and_warned_about(client: docker.DockerClient, py_image: str,
                                                              tmp_path: Path, run_id: str) -> None:
    facts = stages_of(client, py_image, tmp_path, run_id, ["facts"])["facts"]
    assert facts.status is Status.PASSED
    assert facts.evidence["shm"]["total_bytes"] == 64 << 20 and facts.evidence["shm"]["fstype"] == "tmpfs"
    assert any(w.startswith("/dev/shm is 64 MiB, below the 1 GiB NCCL needs") and "--shm-size 16g" in w
               for w in facts.evidence["warnings"])


def test_the_verification_containers_dev_shm_is_enough(client: docker.DockerClient, py_image: str,
                                                       tmp_path: Path, run_id: str) -> None:
    options = gpus.container_options(gpus.Discovery(problem="no GPU in this test"))
    facts = stages_of(client, py_image, tmp_path, run_id, ["facts"], options)["facts"]
    assert facts.evidence["shm"]["total_bytes"] == 16 << 30
    assert not any("/dev/shm" in w for w in facts.evidence.get("warnings", []))


def test_the_shm_size_asked_for_is_the_containers(client: docker.DockerClient, py_image: str, tmp_path: Path,
                                                   run_id: str) -> None:
    """`verify --shm-size 64m` reproduces Docker's default on purpose (what a tp server then meets)."""
    options = gpus.container_options(gpus.Discovery(problem="no GPU in this test"), shm_size="64m")
    found = stages_of(client, py_image, tmp_path, run_id, ["facts", "gpu-visible", "nccl-allreduce"], options)
    assert found["facts"].evidence["shm"]["total_bytes"] == 64 << 20
    assert found["nccl-allreduce"].status is Status.SKIPPED   # no GPU here: never a pass
    assert (found["nccl-allreduce"].reason or "").startswith("needs a GPU")


def dist_info(name: str, version: str, *requires: str) -> dict[str, bytes]:
    folder = f"{SITE}/{name.replace('-', '_')}-{version}.dist-info"
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {r}" for r in requires)]
    return {f"{folder}/METADATA": ("\n".join(lines) + "\n").encode()}


def test_drifted_coupled_packages_fail_the_import_stage_naming_both_versions(
        client: docker.DockerClient, py_image: str, tmp_path: Path, run_id: str) -> None:
    files = {f"{SITE}/torch/__init__.py": b"__version__ = '2.11.0+cu130'\n", f"{SITE}/sglang/__init__.py": b"",
             **dist_info("torch", "2.11.0+cu130"), **dist_info("sglang", "0.5.23", "torch==2.14.1"),
             **dist_info("sglang-kernel", "0.4.10", "torch==2.14.1"),
             **dist_info("flashinfer-python", "0.7.2", "torch"), **dist_info("flashinfer-cubin", "0.6.13")}
    image = tinyimages.derive(client, py_image, files)
    try:
        found = stages_of(client, image, tmp_path, run_id, ["facts", "import"])["import"]
    finally:
        client.images.remove(image, force=True)
    assert found.status is Status.FAILED
    assert "flashinfer-cubin version (0.6.13) does not match flashinfer version (0.7.2, flashinfer-python)" in (
        found.reason or "")
    assert ("sglang-kernel 0.4.10 is built for torch 2.14.1 (sglang-kernel 0.4.10 requires torch==2.14.1), but "
            "torch 2.11.0+cu130 is installed") in (found.reason or "")
    assert found.failure_class in ("flashinfer-cubin-version-mismatch", "sgl-kernel-built-for-other-torch")
    assert found.evidence["modules"]["torch"].startswith("ok")   # every module imported: the metadata decides
    assert found.evidence["coupled"]["sgl_kernel"]["built_for_torch"] == "2.14.1"
