"""End to end: build the real SGLang 0.5.16 cells of the default matrix through `nox -s build`'s code
path (real BuildKit builds from real PyPI locks) and check what the verification ladder says about them.

- toolkit `none` (the seed incident): `import sglang` passes, deep_gemm fails with class
  cuda-home-missing and a hint naming CUDA_HOME; the cell is an expected failure, not good.
- toolkit `pip`: toolchain and JIT compiles (Triton's included) pass for sm_90a, sm_100a and sm_120a; torch is cu130;
  without a GPU the best verdict is cpu-checked and no good tag is applied.
- the `none` image with only CUDA_HOME pointed at pip's nvcc fails JIT for want of a host compiler.

Every cell image the test builds is removed afterwards (the BuildKit cache stays: it makes reruns
fast); the base image goes at the end of the session (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import docker

from buildscripts.probe import fatbin
from buildscripts.results import CellResult, RunResults, Status, Verdict
from buildscripts.verify.one_image import verify_image
from buildscripts.verify.plan import Plan
from tests.verification import request

ROOT = Path(__file__).resolve().parents[2]
NONE = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"
PIP = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
PIP_NVCC_HOME = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"


def cell(run: RunResults, cell_id: str) -> CellResult:
    found = run.cell(cell_id)
    assert found is not None, [c.cell_id for c in run.cells]
    return found


def test_the_seed_incident_is_caught_and_classified(run: RunResults) -> None:
    none = cell(run, NONE)
    assert none.build is not None and none.build.status is Status.PASSED
    imports = none.stage("import")
    assert imports is not None and imports.status is Status.FAILED
    assert imports.failure_class == "cuda-home-missing"
    assert "CUDA_HOME" in (imports.hint or "")
    modules = imports.evidence["modules"]
    assert modules["sglang"] == "ok 0.5.16", modules  # SGLang itself imports; deep_gemm asserts a CUDA home
    assert modules["deep_gemm"].startswith("failed: AssertionError") and "cuda_home" in modules["deep_gemm"]
    assert none.verdict is Verdict.EXPECTED_FAILURE
    assert none.tags == []


def test_pip_toolkit_compiles_for_every_target_arch(run: RunResults) -> None:
    pip = cell(run, PIP)
    for name in ("facts", "import", "flavour", "toolchain", "jit-compile"):
        stage = pip.stage(name)
        assert stage is not None and stage.status is Status.PASSED, (name, stage)
    jit = pip.stage("jit-compile")
    assert jit is not None
    for arch in ("sm_90a", "sm_100a", "sm_120a"):  # each part compiled machine code for each arch
        assert jit.evidence["per_arch"][arch] == {
            "flashinfer": "ok", "deep_gemm": "ok", "torch-extension": "ok", "triton": "ok"}, (
            arch, jit.evidence["per_arch"])
    assert pip.versions.get("torch", "").startswith("2.11.0")


def test_gpu_stages_run_where_a_gpu_is_and_are_skipped_elsewhere(run: RunResults, gpu_in_containers: bool) -> None:
    """On a GPU runner the whole ladder passes in the container and the cell earns its good tags; on a CPU
    machine every GPU stage is skipped with its reason, and nothing is tagged."""
    pip = cell(run, PIP)
    stages = [pip.stage(name) for name in ("gpu-visible", "kernel-smoke", "server", "first-generation")]
    if gpu_in_containers:
        for stage in stages:
            assert stage is not None and stage.status is Status.PASSED and stage.gpu, stage
            assert stage.where.startswith("container: "), stage.where
        assert pip.verdict is Verdict.VERIFIED and pip.tags, pip.verdict_reason
    else:
        for stage in stages:
            assert stage is not None and stage.status is Status.SKIPPED and stage.reason, stage
        assert pip.verdict is Verdict.CPU_CHECKED
        assert pip.tags == []


def test_inside_the_pip_image_sglang_imports_and_torch_is_cu130(run: RunResults) -> None:
    ref = cell(run, PIP).image.ref
    assert ref
    out = docker.from_env().containers.run(
        ref, ["python", "-c", "import sglang, torch; print(sglang.__version__, torch.version.cuda)"], remove=True)
    assert out.decode().split() == ["0.5.16", "13.0"]


def test_both_cells_ship_one_compiler_and_no_documentation(run: RunResults) -> None:
    """The SGLang layer's nvcc is already the lane's 13.0, so the pip toolkit layer installs no second
    compiler over it; dpkg's filters keep manuals and docs out of the base and the toolkit's packages."""
    client = docker.from_env()
    pip, none = cell(run, PIP).image, cell(run, NONE).image
    assert pip.layers["toolkit: pip"] < 1_000_000, pip.layers  # the stage is there, and holds ~nothing
    script = (f"{PIP_NVCC_HOME}/bin/nvcc --version | tail -1; "
              "find /usr/share/man /usr/share/doc -type f ! -name copyright | wc -l; "
              "ls /usr/share/doc/*/copyright | wc -l")
    for ref in (pip.ref, none.ref):
        assert ref
        out = client.containers.run(ref, ["sh", "-c", script], entrypoint=[], remove=True).decode().splitlines()
        assert "cuda_13.0" in out[0], (ref, out)
        assert out[1] == "0", (ref, out)  # no manual, no document but the licences
        assert int(out[2]) > 50, (ref, out)  # every package's copyright file stays


def test_the_pip_toolkit_builds_a_fatbinary_for_every_target(run: RunResults, tmp_path: Path) -> None:
    """nvcc from PyPI wheels compiles a real program with machine code for each arch (the same program
    ran on an H200: evidence/h200-2026-11-29/pip-toolkit-binaries.md)."""
    ref = cell(run, PIP).image.ref
    assert ref
    source = ROOT / "tests" / "gpu" / "fatbin_smoke.cu"
    gencodes = " ".join(f"-gencode arch=compute_{a[3:]},code={a}" for a in ("sm_90a", "sm_100a", "sm_120a"))
    docker.from_env().containers.run(
        ref, ["sh", "-c", f"nvcc -O2 {gencodes} -cudart static /src/smoke.cu -o /out/smoke"], remove=True,
        volumes={str(source): {"bind": "/src/smoke.cu", "mode": "ro"}, str(tmp_path): {"bind": "/out"}})
    found = fatbin.coverage(fatbin.read_file(str(tmp_path / "smoke")), ["sm_90a", "sm_100a", "sm_120a"])
    assert {arch: info["status"] for arch, info in found.items()} == {
        "sm_90a": "sass", "sm_100a": "sass", "sm_120a": "sass"}


def test_an_exported_rootfs_keeps_the_environment(run: RunResults) -> None:
    """Proxmox LXC runs an exported rootfs: image ENV is lost there, /etc/environment is not."""
    ref = cell(run, PIP).image.ref
    assert ref
    env = docker.from_env().containers.run(ref, ["cat", "/etc/environment", "/etc/sglang-images/cell.json"],
                                           remove=True).decode()
    assert "CUDA_HOME=/usr/local/cuda" in env
    assert "PATH=/usr/local/cuda/bin:/opt/venv/bin:" in env
    assert PIP in env  # the cell's identity travels with the rootfs too


def test_no_host_compiler_fails_the_jit_stage(run: RunResults, tmp_path: Path) -> None:
    ref = cell(run, NONE).image.ref
    assert ref
    plan = Plan.make(archs=["sm_90a"], lane_cuda="13.0", stages=["toolchain", "jit-compile"], stage_timeout=600)
    environment = {"CUDA_HOME": PIP_NVCC_HOME, "PATH": f"{PIP_NVCC_HOME}/bin:/opt/venv/bin:/usr/bin:/bin"}
    stages = verify_image(docker.from_env(), ref, request(plan, tmp_path / "no-compiler", cell_id="no-compiler",
                                                          options={"environment": environment}))
    failed = [s for s in stages if s.status is Status.FAILED]
    assert failed, stages
    assert failed[0].failure_class == "no-host-compiler", failed[0]
