"""Tensor parallelism: the tp profile's size from the GPUs the host handed over, the server skipped below two
GPUs (never passed as if tp ran), nccl-allreduce held to the world size handed over, the container given
every GPU and the /dev/shm asked for."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from buildscripts import arguments, pipeline, pipeline_options
from buildscripts.errors import ConfigError
from buildscripts.matrix import load
from buildscripts.probe import core
from buildscripts.results import CellResult, ImageInfo, StageResult, Status, Verdict, judged
from buildscripts.results.record import BuildResult
from buildscripts.verify import gpus, host_model, provision, reuse, runner, tp
from buildscripts.verify.gpus import Discovery, Gpu, Handed
from buildscripts.verify.plan import Plan
from buildscripts.verify.served import generation_stage
from buildscripts.workspace import Workspace
from tests.results_factory import PROJECT_MATRIX, cpu_passed, gpu_passed

H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)
H200_B = Gpu(1, "NVIDIA H200", "GPU-0b00b1e5-0000-4000-8000-00000000beef", "9.0", "580.159.04", 143771)
TP = load(PROJECT_MATRIX).spec.profiles["tp"]


def plan() -> Plan:
    return Plan.make(archs=["sm_90a"], lane_cuda="13.0", profile=TP, profile_name="tp")


def test_the_tp_profile_spans_the_runs_gpus_and_the_others_do_not() -> None:
    profiles = load(PROJECT_MATRIX).spec.profiles
    assert tp.wants_all_gpus(TP)
    assert [name for name, p in profiles.items() if tp.wants_all_gpus(p)] == ["tp", "tp-shm"]
    assert TP.env["NCCL_NVLS_ENABLE"] == "0"   # NVLink multicast stays off in every tp verification
    assert profiles["tp-shm"].args == TP.args and profiles["tp-shm"].env["NCCL_P2P_DISABLE"] == "1"


def test_two_gpus_give_tp_size_two_and_a_server() -> None:
    made = tp.planned(plan(), Handed((H200, H200_B)))
    assert made.server_args[:2] == ("--tp-size", "2")
    assert made.server_skip is None
    assert "--server-skip" not in made.probe_args("container")


@pytest.mark.parametrize(("handed", "words"), [
    (Handed((H200,)), "this run was given 1 GPU"),
    (Handed(why_none="no GPU on this runner"), "this run was given no GPU (no GPU on this runner)"),
])
def test_fewer_than_two_gpus_skip_the_server_with_the_reason(handed: Handed, words: str) -> None:
    made = tp.planned(plan(), handed)
    assert made.server_args[:2] == ("--tp-size", "1")
    assert made.server_skip is not None and words in made.server_skip and "at least 2" in made.server_skip
    args = made.probe_args("host")
    assert args[args.index("--server-skip") + 1] == made.server_skip


def gpu(index: int) -> Gpu:
    return Gpu(index, "NVIDIA B200", f"GPU-0000000{index}-0000-4000-8000-000000000000", "10.0", "580.159.04", 183359)


@pytest.mark.parametrize("count", [2, 4, 8])
def test_the_tp_profiles_serve_a_model_whose_heads_split_over_two_four_or_eight_gpus(count: int) -> None:
    made = tp.planned(plan(), Handed(tuple(gpu(i) for i in range(count))))
    assert made.server_model == "llama-tp" and made.server_skip is None
    assert made.server_args[:2] == ("--tp-size", str(count))
    config = host_model.ARCHITECTURES["llama-tp"].config
    assert config["num_attention_heads"] == 8 and 8 % count == 0
    assert int(str(config["intermediate_size"])) % count == 0   # the MLP splits too


@pytest.mark.parametrize("count", [3, 6])
def test_gpus_that_do_not_divide_the_heads_skip_the_server_with_the_reason(count: int) -> None:
    made = tp.planned(plan(), Handed(tuple(gpu(i) for i in range(count))))
    assert made.server_skip is not None
    assert f"8 attention heads over {count} GPUs" in made.server_skip and "2, 4 or 8" in made.server_skip


def test_the_tp_llama_decodes_and_keeps_the_default_llama_as_it_was() -> None:
    wide = host_model.make(seed=331, model="llama-tp", max_draws=1)   # a seed whose first draw has clear margins
    assert wide.config["num_attention_heads"] == 8 and wide.architecture == "LlamaForCausalLM"
    assert wide.weights["model.layers.0.self_attn.q_proj.weight"].shape == (8 * 64, 256)
    assert len(wide.reference.output_ids) == host_model.NEW_TOKENS
    assert host_model.ARCHITECTURES["llama"].config["num_attention_heads"] == 4   # what the baked caches know


def test_a_profile_without_the_placeholder_is_left_alone() -> None:
    default = Plan.make(archs=["sm_90a"], lane_cuda="13.0")
    assert tp.planned(default, Handed((H200,))) is default


def test_the_probe_skips_the_server_with_the_hosts_reason() -> None:
    ctx = core.Context(archs=["sm_90a"], server_skip="profile 'tp' needs at least 2", stop_file="/nowhere")
    ctx.gpu = {"name": "NVIDIA H200", "arch": "sm_90", "count": 1}
    ctx.results["gpu-visible"] = {"status": core.PASSED}
    result = core.run_stage(ctx, core.REGISTRY["server"])
    assert result["status"] == core.SKIPPED and result["reason"] == "profile 'tp' needs at least 2"


def test_a_skipped_server_skips_the_generation_with_its_reason() -> None:
    server = StageResult(name="server", status=Status.SKIPPED, reason="profile 'tp' needs at least 2 GPUs")
    aborted = StageResult(name="first-generation", status=Status.ABORTED, reason="prerequisite did not pass: server")
    out = generation_stage(aborted, server, server, None, None)
    assert out.status is Status.SKIPPED and out.reason == "the server was skipped: profile 'tp' needs at least 2 GPUs"


def allreduce(world: int) -> StageResult:
    return StageResult(name="nccl-allreduce", status=Status.PASSED, evidence={"world_size": world},
                       gpu="NVIDIA H200", arch="sm_90")


def test_the_allreduce_passes_only_at_the_world_size_handed_over() -> None:
    assert tp.backed([allreduce(2)], Handed((H200, H200_B)))[0].status is Status.PASSED
    out = tp.backed([allreduce(1)], Handed((H200, H200_B)))[0]
    assert out.status is Status.FAILED and out.failure_class == "gpu-claim-unbacked"
    assert "world size 1, but the host handed over 2 GPU(s)" in (out.reason or "")


def cell(stages: list[StageResult]) -> CellResult:
    return judged(CellResult(cell_id="c", targets=("sm_90a",), build=BuildResult(status=Status.PASSED),
                             image=ImageInfo(ref="img"), stages=stages))


def test_a_record_from_before_the_allreduce_stage_stays_verified() -> None:
    older = [s for s in gpu_passed() if s.name != "nccl-allreduce"]
    assert cell([*cpu_passed(), *older]).verdict is Verdict.VERIFIED
    assert cell([*cpu_passed(), *gpu_passed()]).verdict is Verdict.VERIFIED


def test_a_skipped_tp_server_is_not_verified() -> None:
    stages = [s if s.name != "server" else s.model_copy(update={"status": Status.SKIPPED, "reason": "1 GPU"})
              for s in gpu_passed()]
    assert cell([*cpu_passed(), *stages]).verdict is Verdict.CPU_CHECKED


def test_a_tp_container_gets_every_gpu_and_the_shm_asked_for() -> None:
    found = Discovery(gpus=(H200, H200_B), runtime="cdi")
    options = gpus.container_options(found, gpu=0, all_gpus=True, shm_size="64m")
    assert options["shm_size"] == "64m"
    assert options["device_requests"][0]["DeviceIDs"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert gpus.handed(found, 0, all_gpus=True).gpus == (H200, H200_B)


@pytest.mark.parametrize("text", ["16g", "64m", "1G", "1073741824"])
def test_shm_sizes_in_dockers_form_are_taken(text: str) -> None:
    assert arguments.shm_size_argument(text) == text.lower()


@pytest.mark.parametrize("text", ["", "16 gb", "-1g", "0", "lots"])
def test_other_shm_sizes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="docker's --shm-size"):
        arguments.shm_size_argument(text)


@pytest.mark.parametrize(("profile", "spans"), [("tp", True), ("tp-shm", True), ("default", False)])
def test_the_build_hands_a_tp_profile_every_gpu_as_verify_does(profile: str, spans: bool, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, object] = {}

    class Asked(Exception):
        pass

    def find(client: object, gpu: int, info: object = None, **kwargs: object) -> None:
        asked.update(kwargs, gpu=gpu)
        raise Asked

    class Engine:
        def info(self) -> dict[str, object]:
            return {}

    monkeypatch.setattr(provision, "find", find)
    with pytest.raises(Asked):
        pipeline.prepare(Engine(), load(PROJECT_MATRIX), [],  # type: ignore[arg-type]
                         pipeline_options.BuildOptions(ws=Workspace.at(tmp_path), matrix=load(PROJECT_MATRIX),
                                                       profile=profile), tmp_path)
    assert asked == {"gpu": 0, "all_gpus": spans}


class Claiming:
    """A runner whose image claims every GPU stage passed on the GPU it was given, server included."""

    mode = "host"

    def run(self, options: runner.Options, model: object) -> runner.Outcome:
        claims = [StageResult(name=n, status=Status.PASSED, gpu="NVIDIA H200", arch="sm_90",
                              evidence={"world_size": 1} if n == "nccl-allreduce" else {})
                  for n in options.plan.stages]
        return runner.Outcome(stages=claims)


@pytest.mark.parametrize(("count", "words"), [(1, "needs at least 2"), (3, "8 attention heads over 3 GPUs")])
def test_a_server_the_host_skipped_stays_skipped_whatever_the_image_claims(count: int, words: str,
                                                                            tmp_path: Path) -> None:
    handed = Handed(tuple(gpu(i) for i in range(count)))
    stages = runner.verify(Claiming(), runner.Options(plan=plan(), log_file=tmp_path / "probe.log", handed=handed))
    found = {s.name: s for s in stages}
    assert found["server"].status is Status.SKIPPED and words in (found["server"].reason or "")
    assert found["first-generation"].status is Status.SKIPPED
    assert judged(CellResult(cell_id="c", stages=stages)).verdict is not Verdict.VERIFIED


def test_a_tp_server_is_never_planned_without_the_all_reduce() -> None:
    chosen = Plan.make(archs=["sm_90a"], lane_cuda="13.0", profile=TP, profile_name="tp",
                       stages=["gpu-visible", "server", "first-generation"])
    made = tp.planned(chosen, Handed((H200, H200_B)))
    assert made.stages == ("gpu-visible", "nccl-allreduce", "server", "first-generation")
    alone = Plan.make(archs=["sm_90a"], lane_cuda="13.0", profile=TP, profile_name="tp", stages=["import"])
    assert tp.planned(alone, Handed((H200, H200_B))).stages == ("import",)   # no server: nothing added


def test_reuse_tells_a_tp_run_on_two_gpus_from_one_on_three() -> None:
    def discovery(count: int) -> Discovery:
        return Discovery(gpus=tuple(gpu(i) for i in range(count)), runtime="cdi")

    two, three = (reuse.key("sha256:" + "ab" * 32, plan(), discovery(n)) for n in (2, 3))
    assert two != three
    default = Plan.make(archs=["sm_90a"], lane_cuda="13.0")
    assert reuse.key("sha256:" + "ab" * 32, default, discovery(2)) == reuse.key("sha256:" + "ab" * 32, default,
                                                                                discovery(3))
    assert "tp.py" in reuse.JUDGES


def test_the_build_refuses_per_gpu_servers_with_a_tp_profile(tmp_path: Path) -> None:
    loaded = load(PROJECT_MATRIX)
    opts = pipeline_options.BuildOptions(ws=Workspace.at(tmp_path), matrix=loaded, profile="tp", per_gpu=True)
    with pytest.raises(ConfigError, match="--per-gpu gives each server one GPU"):
        pipeline_options.check_options(loaded, opts)
    per_gpu = pipeline_options.BuildOptions(ws=Workspace.at(tmp_path), matrix=loaded, per_gpu=True)
    pipeline_options.check_options(loaded, per_gpu)

