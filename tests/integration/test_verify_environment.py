"""What the ladder measures where it runs and reads from the image's metadata, in real containers of tiny
images: /dev/shm as the container got it, and version-coupled packages that drifted apart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from buildscripts.results import StageResult, Status
from buildscripts.verify import container, gpus, ladder
from buildscripts.verify.plan import Plan
from tests.integration import tinyimages

SITE = "/usr/lib/python3/dist-packages"


@pytest.fixture(scope="module")
def py_image(client: docker.DockerClient) -> str:
    return tinyimages.python_image(client)


@pytest.fixture
def run_id(client: docker.DockerClient) -> Iterator[str]:
    rid = f"test-{uuid.uuid4().hex[:8]}"
    yield rid
    assert container.leftovers(client, rid) == [], "a verification container was left behind"


def stages_of(client: docker.DockerClient, image: str, logs: Path, run_id: str, names: list[str],
              options: dict[str, Any] | None = None) -> dict[str, StageResult]:
    plan = Plan.make(archs=["sm_90a"], lane_cuda=None, stages=names, stage_timeout=120)
    found = ladder.verify_image(client, image, plan, log_file=logs / "probe.log", run_id=run_id, options=options)
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
