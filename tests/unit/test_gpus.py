"""GPU discovery parsing and the container options that request GPUs (no Docker, no processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildscripts.errors import GpuError
from buildscripts.verify import gpus, per_gpu_containers
from buildscripts.verify.plan import Plan
from buildscripts.verify.request import VerificationRequest
from tests.verification import request

SMI = """0, NVIDIA H200, GPU-aaaa, 9.0, 580.159.04, 143771
1, NVIDIA H200, GPU-bbbb, 9.0, 580.159.04, 143771
"""


def two_gpus(runtime: str | None = "nvidia") -> gpus.Discovery:
    return gpus.Discovery(gpus=gpus.parse_nvidia_smi(SMI), runtime=runtime,
                          problem=None if runtime else "no nvidia runtime")


def test_parse_nvidia_smi_reads_every_gpu_and_its_arch() -> None:
    found = gpus.parse_nvidia_smi(SMI + "No devices were found\n")
    assert [g.index for g in found] == [0, 1]
    assert found[0].arch == "sm_90" and found[0].driver == "580.159.04" and found[0].memory_mib == 143771
    assert gpus.parse_nvidia_smi("12.0 garbage") == ()
    blackwell = gpus.parse_nvidia_smi("0, NVIDIA RTX PRO 6000, GPU-c, 12.0, 590.1, 97887")
    assert blackwell[0].arch == "sm_120"


def test_runtime_from_docker_info_or_cdi_specs() -> None:
    cdi_on = {"Runtimes": {"runc": {}}, "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}
    assert gpus.container_runtime({"Runtimes": {"runc": {}, "nvidia": {}}}, []) == "nvidia"
    assert gpus.container_runtime(cdi_on, ["nvidia.com/gpu"]) == "cdi"
    assert gpus.container_runtime(cdi_on, ["vendor.example/fpga"]) is None
    # A spec on disk is not enough: an engine with CDI off (or too old for it) lists no spec folders.
    assert gpus.container_runtime({"Runtimes": {"runc": {}}}, ["nvidia.com/gpu"]) is None
    assert gpus.container_runtime({}, []) is None


def test_cdi_specs_are_read_for_their_kind(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: []\n")
    (tmp_path / "other.json").write_text('{"cdiVersion": "0.6.0", "kind": "vendor.example/fpga"}')
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("kind: nvidia.com/gpu")
    found = gpus.cdi_specs([str(tmp_path), str(tmp_path / "absent")])
    assert found == {str(tmp_path / "nvidia.yaml"): "nvidia.com/gpu",
                     str(tmp_path / "other.json"): "vendor.example/fpga"}


def test_one_gpu_per_container_with_shm_and_limits() -> None:
    opts = gpus.container_options(two_gpus(), gpu=1)
    (request,) = opts["device_requests"]
    assert request["DeviceIDs"] == ["1"] and request["Capabilities"] == [["gpu"]]
    assert opts["shm_size"] == "16g"
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in opts["ulimits"]}
    assert limits["memlock"] == (-1, -1) and limits["stack"][0] >= 64 * 1024 * 1024
    assert gpus.NO_GPU_ENV not in opts["environment"]


def test_all_gpus_and_cdi_requests() -> None:
    assert gpus.container_options(two_gpus(), all_gpus=True)["device_requests"][0]["DeviceIDs"] == ["0", "1"]
    cdi = gpus.container_options(two_gpus("cdi"), gpu=0)["device_requests"][0]
    assert cdi["Driver"] == "cdi" and cdi["DeviceIDs"] == ["nvidia.com/gpu=0"]


def test_no_runtime_means_no_request_and_the_reason_reaches_the_probe() -> None:
    opts = gpus.container_options(two_gpus(None), gpu=0)
    assert "device_requests" not in opts
    assert opts["environment"][gpus.NO_GPU_ENV] == "no nvidia runtime"
    bare = gpus.container_options(gpus.Discovery(problem="nvidia-smi not found"), gpu=None)
    assert bare["environment"][gpus.NO_GPU_ENV] == "nvidia-smi not found"
    assert "device_requests" not in bare and bare["shm_size"] == "16g"


def test_unknown_gpu_index_is_a_clear_error() -> None:
    with pytest.raises(GpuError, match="GPU 5 does not exist"):
        gpus.container_options(two_gpus(), gpu=5)


def test_per_gpu_runs_side_by_side_in_gpu_order() -> None:
    import threading
    import time

    seen: set[str] = set()

    def verify(gpu: gpus.Gpu) -> str:
        seen.add(threading.current_thread().name)
        time.sleep(0.2)  # both must be in flight at once for two thread names to show up
        return gpu.uuid

    assert per_gpu_containers.per_gpu(two_gpus(), verify) == ["GPU-aaaa", "GPU-bbbb"]
    assert len(seen) == 2
    assert per_gpu_containers.per_gpu(gpus.Discovery(), verify) == []
    assert gpus.host_env(two_gpus().gpus[1]) == {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}


def test_verify_per_gpu_gives_each_container_its_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, object] = {}

    def fake_verify_image(client: object, image: str, asked: VerificationRequest) -> list[object]:
        options = asked.provision.options
        calls[str(asked.log_file)] = options["device_requests"][0]["DeviceIDs"]
        return []

    monkeypatch.setattr(per_gpu_containers, "verify_image", fake_verify_image)
    plan = Plan.make(archs=["sm_90a"], lane_cuda="13.0")
    asked = request(plan, Path("/runs/x"), run_id="r", cell_id="c", discovery=two_gpus())
    found = per_gpu_containers.verify_per_gpu(object(), "img", asked)  # type: ignore[arg-type]
    assert found == {0: [], 1: []}
    assert calls == {"/runs/x/gpu0/probe.log": ["0"], "/runs/x/gpu1/probe.log": ["1"]}


def test_per_gpu_results_combine_to_the_worst_per_stage() -> None:
    from buildscripts.results import StageResult, Status

    def ladder(server: Status, reason: str | None = None) -> list[StageResult]:
        return [StageResult(name="gpu-visible", status=Status.PASSED, gpu="H200", arch="sm_90"),
                StageResult(name="server", status=server, reason=reason, gpu="H200", arch="sm_90")]

    both_ok = per_gpu_containers.combine_per_gpu({0: ladder(Status.PASSED), 1: ladder(Status.PASSED)})
    assert [s.status for s in both_ok] == [Status.PASSED, Status.PASSED]
    assert both_ok[1].evidence["per_gpu"] == {"0": "passed", "1": "passed"}
    one_bad = per_gpu_containers.combine_per_gpu({0: ladder(Status.PASSED), 1: ladder(Status.FAILED, "died at 30 s")})
    assert one_bad[1].status is Status.FAILED
    assert one_bad[1].reason == "on GPU 1: died at 30 s"
    assert one_bad[0].status is Status.PASSED


def test_a_cdi_spec_without_an_ld_cache_hook_is_warned_about() -> None:
    root = Path(__file__).resolve().parents[2]
    measured = json.loads((root / "evidence" / "h200-container-2026-11-30" / "cdi-spec.json").read_text())
    assert not gpus.refreshes_ld_cache(measured)  # the spec that made Triton miss libcuda.so.1 there
    ldconfig = [{"hookName": "startContainer", "path": "/sbin/ldconfig"}]
    with_ldconfig = {**measured, "containerEdits": {**measured["containerEdits"], "hooks": ldconfig}}
    assert gpus.refreshes_ld_cache(with_ldconfig)
    nvidia_ctk = {"kind": "nvidia.com/gpu", "devices": [], "containerEdits": {"hooks": [
        {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
         "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]}]}}
    assert gpus.refreshes_ld_cache(nvidia_ctk)
