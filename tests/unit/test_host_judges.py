"""What the host decides itself: the GPU facts of every GPU stage (verify/claims.py), the server stages from
its own observation (served.py: a probe's word never passes them; a download tried with no route out is
named), and the tiny model with its reference decode (host_model.py, reference.py). The reference against
the image's own torch/transformers decode: tests/e2e/test_reference_decode.py."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from safetensors.numpy import load

from buildscripts.probe.server import Readiness
from buildscripts.probe.tinymodel import LAYERS, VOCAB
from buildscripts.results import StageResult, Status
from buildscripts.verify import claims, classify, host_model, observe, reference, served
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.handoff import Handover, Observation

H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)
H200_B = Gpu(1, "NVIDIA H200", "GPU-0b00b1e5-0000-4000-8000-00000000beef", "9.0", "580.159.04", 143771)


@functools.cache
def model() -> host_model.TinyModel:
    """The tests' tiny model, made when a test first asks (not at collection, where every worker would make it
    for files it never runs), of a seed whose first draw has clear margins: seed 7 took 363 draws, 4.4 s."""
    return host_model.make(seed=91)


def gpu_stage(name: str, status: Status = Status.PASSED, gpu: str | None = "NVIDIA H200", arch: str | None = "sm_90",
              **evidence: object) -> StageResult:
    return StageResult(name=name, status=status, gpu=gpu, arch=arch, where="container (gpu)", evidence=dict(evidence))


# ---------------------------------------------------------------------------------------- GPU facts

def test_no_gpu_handed_over_fails_every_gpu_pass_and_keeps_no_gpu_fact() -> None:
    stages = [StageResult(name="facts", status=Status.PASSED, gpu="NVIDIA B200", arch="sm_100"),
              gpu_stage("gpu-visible", gpu="NVIDIA B200", arch="sm_100"), gpu_stage("kernel-smoke", gpu="NVIDIA B200",
                                                                                   arch="sm_100")]
    found = claims.backed(stages, Handed(why_none="no GPU requested for this container"), "container")
    assert found[0].status is Status.PASSED and (found[0].gpu, found[0].arch, found[0].where) == (
        None, None, "container (cpu)")
    for stage in found[1:]:
        assert stage.status is Status.FAILED and stage.failure_class == "gpu-claim-unbacked"
        assert "NVIDIA B200 (sm_100)" in (stage.reason or "") and "no GPU requested" in (stage.reason or "")
        assert (stage.gpu, stage.arch) == (None, None) and stage.hint == classify.hint_for("gpu-claim-unbacked")


@pytest.mark.parametrize(("claimed", "words"), [
    ({"gpu": "NVIDIA B200", "arch": "sm_100"}, "the host's GPU is NVIDIA H200 (sm_90)"),
    ({"gpu": "NVIDIA H200", "arch": "sm_100a"}, "reported NVIDIA H200 (sm_100a)"),
    ({"gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90"}, "reported NVIDIA H100 80GB HBM3"),
])
def test_another_gpu_than_the_hosts_fails_with_the_hosts_facts(claimed: dict[str, str], words: str) -> None:
    found = claims.backed([gpu_stage("gpu-visible", gpu=claimed["gpu"], arch=claimed["arch"])], Handed((H200,)),
                          "container")[0]
    assert found.status is Status.FAILED and found.failure_class == "gpu-claim-unbacked"
    assert words in (found.reason or "")
    assert (found.gpu, found.arch) == ("NVIDIA H200", "sm_90")


def test_the_gpu_named_by_uuid_must_be_one_handed_over() -> None:
    visible = gpu_stage("gpu-visible", uuid="GPU-00000000-1111-2222-3333-444444444444")
    found = claims.backed([visible], Handed((H200, H200_B)), "lxc")[0]
    assert found.status is Status.FAILED and "which the host did not hand over" in (found.reason or "")
    picked = claims.backed([gpu_stage("gpu-visible", uuid=H200_B.uuid.removeprefix("GPU-").upper()),
                            gpu_stage("server")], Handed((H200, H200_B)), "lxc")
    assert [s.status for s in picked] == [Status.PASSED, Status.PASSED]
    assert {s.where for s in picked} == {"lxc: NVIDIA H200 (sm_90)"}
    unnamed = claims.backed([gpu_stage("gpu-visible")], Handed((H200, H200_B)), "host")[0]
    assert unnamed.status is Status.FAILED and "several GPUs" in (unnamed.reason or "")


def test_a_backed_pass_carries_the_hosts_names_and_a_failure_its_gpu() -> None:
    found = claims.backed([gpu_stage("gpu-visible", gpu="nvidia  H200", arch="sm_90"),
                           gpu_stage("kernel-smoke", Status.FAILED),
                           gpu_stage("server", Status.SKIPPED, gpu=None, arch=None)], Handed((H200,)), "container")
    assert found[0].status is Status.PASSED and found[0].gpu == "NVIDIA H200"
    assert found[1].status is Status.FAILED and found[1].arch == "sm_90" and found[1].failure_class is None
    assert (found[2].status, found[2].arch) == (Status.SKIPPED, None)


# -------------------------------------------------------------------------------------- server stages

def seen(*, ready: bool = True, cut: bool = True, problem: str | None = None,
         generation: dict[str, object] | None = None) -> Observation:
    handover = Handover(port=31000, pid=77, host="127.0.0.1", stop_file="/opt/probe/stop", log="server.log")
    readiness = Readiness(ready=ready, seconds_to_http=40.0, seconds_to_ready=90.0 if ready else None, waited_s=95.0,
                          exit_code=None if ready else 1)
    return Observation(handover, endpoint="http://127.0.0.1:31000", readiness=readiness,
                       network={"cut": cut, "checked_by": "host"}, problem=problem, generation=dict(generation or {}))


def probe_server(status: Status = Status.PASSED, reason: str | None = None,
                 log_excerpt: str | None = None) -> StageResult:
    evidence = {"argv": ["-m", "sglang.launch_server"], "seconds_to_ready": 0.1, "shutdown": {"clean": True}}
    return StageResult(name="server", status=status, gpu="NVIDIA H200", arch="sm_90", evidence=evidence,
                       reason=reason, log_excerpt=log_excerpt)


FIRST = StageResult(name="first-generation", status=Status.SKIPPED, reason="made by the host")


def test_a_server_pass_without_a_hand_over_fails_and_so_does_its_generation() -> None:
    claimed = StageResult(name="first-generation", status=Status.PASSED)
    server, generation = served.merge([probe_server(), claimed], None, model())
    assert server.status is Status.FAILED and server.failure_class == "server-unobserved"
    assert generation.status is Status.FAILED and generation.failure_class == "server-unobserved"
    skipped = probe_server(Status.SKIPPED, reason="the profile does not apply")
    assert served.merge([skipped, FIRST], None, model())[0] == skipped   # a skip claims nothing: kept


def test_the_hosts_timings_replace_the_probes_and_the_generation_is_the_hosts() -> None:
    observation = seen(generation={"generate": {"output_ids": [1, 2]}})
    server, generation = served.merge([probe_server(), FIRST], observation, model())
    assert server.status is Status.PASSED and server.evidence["seconds_to_ready"] == 90.0
    assert server.evidence["observed_by"] == "host" and "shutdown" not in server.evidence
    assert generation.status is Status.PASSED and generation.evidence["shutdown"] == {"clean": True}
    failed = served.merge([probe_server(), FIRST], seen(problem="generation mismatch: GPU token 3 is 9"), model())[1]
    assert failed.status is Status.FAILED and failed.failure_class == "generation-mismatch"


def test_a_generation_the_host_had_no_reference_for_never_passes() -> None:
    observation = seen(generation={"generate": {"output_ids": [1, 2]}})
    server, generation = served.merge([probe_server(), FIRST], observation, None)   # no tiny model made
    assert server.status is Status.PASSED
    assert generation.status is Status.FAILED and generation.failure_class == "server-unobserved"
    assert "no reference" in (generation.reason or "")


def test_a_download_tried_with_no_route_out_is_named_in_reason_and_hint() -> None:
    url = "https://artifacts.example.invalid/cubins/7a1b/flashinfer/trtllm/fmha.cubin"
    log = (f"INFO flashinfer.jit: Fetching fmha.cubin from {url}\n"
           f"WARNING Downloading {url}: attempt 1 failed: HTTPSConnectionPool(host='artifacts.example.invalid', "
           "port=443): Max retries exceeded with url: /cubins/7a1b/flashinfer/trtllm/fmha.cubin (Caused by "
           "NewConnectionError(\"Failed to establish a new connection: [Errno 101] Network is unreachable\"))\n"
           "RuntimeError: fmha.cubin could not be loaded")
    died = probe_server(Status.FAILED, reason="server process exited with code 1 after 48s: RuntimeError: x",
                        log_excerpt=log)
    server = served.merge([died, FIRST], seen(ready=False), model())[0]
    assert server.failure_class == "offline-download"
    assert (server.reason or "").endswith(f"with no route out, the server tried to download {url}")
    assert (server.hint or "").startswith(f"It tried {url}. ")
    kept = served.merge([died, FIRST], seen(ready=False, cut=False), model())[0]  # network not cut: another cause
    assert kept.failure_class != "offline-download"


@pytest.mark.parametrize(("text", "url"), [
    ("OSError: We couldn't connect to 'https://hub.example.invalid' to load the files, and couldn't find them",
     "https://hub.example.invalid"),
    ("urllib3...: HTTPConnectionPool(host='10.1.2.3', port=8080): Max retries exceeded with url: /a/b.bin?x=1 "
     "(Caused by NameResolutionError)", "http://10.1.2.3:8080/a/b.bin?x=1"),
    ("Traceback ...\nRuntimeError: CUDA error: out of memory", None),
    ("see https://docs.example.invalid/faq for help\nValueError: bad config", None),
])
def test_the_url_of_a_failed_download(text: str, url: str | None) -> None:
    assert served.attempted_download(text) == url


# ----------------------------------------------------------------------------------- the tiny model

def test_weights_are_bf16_values_and_the_checkpoint_reads_back() -> None:
    files = model().files()
    tensors = load(files["model.safetensors"])
    assert set(tensors) == set(model().weights) and len(tensors) == 3 + 9 * LAYERS
    for name, value in tensors.items():
        assert value.dtype == np.float32 and np.array_equal(value, model().weights[name])
        assert not (value.view(np.uint32) & 0xFFFF).any(), f"{name} holds values bf16 cannot hold exactly"
    config = json.loads(files["config.json"])
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == VOCAB


def test_bf16_rounds_to_nearest_even() -> None:
    halfway = [1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5]   # a tie goes to the even neighbour
    assert reference.bf16(np.array(halfway)).tolist() == [1.0, 1.0, 1.015625, -2.5]


def test_a_seed_draws_the_same_model_and_every_run_gets_a_new_one() -> None:
    again = host_model.make(seed=91)
    assert again.reference == model().reference and again.draws == model().draws
    assert model().reference.weakest() >= host_model.MIN_MARGIN and len(model().reference.output_ids) == 16
    fresh = host_model.make()
    assert fresh.seed != model().seed and fresh.reference.prompt_ids != model().reference.prompt_ids


def test_a_margin_no_seed_reaches_is_a_clear_error() -> None:
    with pytest.raises(Exception, match="gave the tiny model clear margins"):
        host_model.make(seed=1, min_margin=50.0, max_draws=3)


def test_a_fresh_decoder_given_the_whole_sequence_picks_the_same_next_token() -> None:
    shape = reference.Shape.of(host_model.CONFIG)
    ids = [*model().reference.prompt_ids, *model().reference.output_ids[:-1]]
    for i in (len(model().reference.prompt_ids), len(ids)):   # the sequence so far, given at once
        logits = reference.Llama(model().weights, shape).step(ids[:i])
        assert int(np.argmax(logits)) == model().reference.output_ids[i - len(model().reference.prompt_ids)]


def test_tokens_are_compared_as_ids_and_read_from_either_answer_form() -> None:
    want = model().reference
    assert observe.compare_tokens(list(want.output_ids), want) is None
    wrong = [*want.output_ids[:3], (want.output_ids[3] + 1) % 512, *want.output_ids[4:]]
    assert "GPU token 3 is" in (observe.compare_tokens(wrong, want) or "")
    assert "returned 2 tokens" in (observe.compare_tokens(list(want.output_ids[:2]), want) or "")
    assert observe.output_ids({"output_ids": [3, 4]}) == [3, 4]
    assert observe.output_ids({"meta_info": {"output_token_logprobs": [[-0.1, 7, None], [-0.2, 8, None]]}}) == [7, 8]
