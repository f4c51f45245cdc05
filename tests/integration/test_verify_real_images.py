"""The CPU ladder on real SGLang images built from the default matrix (skipped until they are built
with `nox -s build -- --only 'sglang0.5.16-*'`): the seed incident is caught and classified, the pip
toolkit compiles for every target arch, and an image without a host compiler fails JIT with that class."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildscripts import container, matrix, verify
from buildscripts.results import Status, Verdict

ROOT = Path(__file__).resolve().parents[2]
NONE_CELL = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"
PIP_CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


def built(cell_id: str) -> str:
    client = container.client()
    images = client.images.list(filters={"label": f"io.sglang-images.cell={cell_id}"})
    if not images:
        pytest.skip(f"no image of {cell_id} in the engine: build it with nox -s build -- --only {cell_id}")
    newest = max(images, key=lambda i: i.attrs.get("Created", ""))
    return str(newest.id)


def cell(cell_id: str) -> matrix.Cell:
    return next(c for c in matrix.load(ROOT / "matrix.yaml").cells if c.id == cell_id)


@pytest.fixture
def run_id() -> Iterator[str]:
    rid = f"test-{uuid.uuid4().hex[:8]}"
    yield rid
    assert container.leftovers(rid) == []


def test_toolkit_none_fails_at_import_with_cuda_home_missing(tmp_path: Path, run_id: str) -> None:
    result = verify.check_image(built(NONE_CELL), cell=cell(NONE_CELL), logs=tmp_path, run_id=run_id,
                                stages=["facts", "import", "flavour", "toolchain"])
    imp = result.stage("import")
    assert imp is not None and imp.status is Status.FAILED
    assert imp.evidence["modules"]["sglang"].startswith("ok")
    assert imp.evidence["modules"]["deep_gemm"].startswith("failed")
    assert imp.failure_class == "cuda-home-missing"
    assert imp.hint and "CUDA_HOME" in imp.hint
    assert result.verdict is Verdict.EXPECTED_FAILURE   # declared in matrix.yaml; never a good cell
    assert result.verdict not in (Verdict.VERIFIED, Verdict.CPU_CHECKED)
    toolchain = result.stage("toolchain")
    assert toolchain is not None and toolchain.failure_class == "cuda-home-missing"


def test_pip_toolkit_compiles_for_every_target_arch(tmp_path: Path, run_id: str) -> None:
    the_cell = cell(PIP_CELL)
    stages = {s.name: s for s in verify.verify_cell(built(PIP_CELL), the_cell, logs=tmp_path, run_id=run_id,
                                                    stages=["toolchain", "jit-compile"])}
    assert stages["toolchain"].status is Status.PASSED, stages["toolchain"].reason
    assert stages["jit-compile"].status is Status.PASSED, stages["jit-compile"].reason
    for arch in ("sm_90a", "sm_100a", "sm_120a"):
        assert stages["toolchain"].evidence["smoke"]["per_arch"][arch]["compile"] == "ok"
        assert stages["jit-compile"].evidence["per_arch"][arch] == {
            "flashinfer": "ok", "deep_gemm": "ok", "torch-extension": "ok"}


def test_an_image_without_host_compiler_fails_jit_with_that_class(tmp_path: Path, run_id: str) -> None:
    client = container.client()
    holder = client.containers.run(built(PIP_CELL), entrypoint=["sh", "-c"], detach=True, command=[
        "rm -f /usr/bin/g++* /usr/bin/gcc* /usr/bin/c++ /usr/bin/cc /usr/bin/x86_64-linux-gnu-g*"])
    tag = f"sglang-images-test/nocompiler:{uuid.uuid4().hex[:8]}"
    try:
        assert holder.wait(timeout=120)["StatusCode"] == 0
        holder.commit(repository=tag.split(":", maxsplit=1)[0], tag=tag.split(":")[1])
        stages = {s.name: s for s in verify.verify_image(tag, archs=["sm_90a", "sm_100a", "sm_120a"],
                                                         lane_cuda="13.0", logs=tmp_path, run_id=run_id,
                                                         stages=["toolchain", "jit-compile"])}
        assert stages["jit-compile"].status is Status.FAILED
        assert stages["jit-compile"].failure_class == "no-host-compiler"
        assert stages["toolchain"].failure_class == "no-host-compiler"
    finally:
        holder.remove(force=True)
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, force=True)
