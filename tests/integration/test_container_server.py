"""The server stages in a real container, judged by the host: a tiny image with the CPU stand-in
(tests/cpu_stand_in: torch that reports an H200, a server with SGLang's API) and the tokenizers package.
The host copies its fresh model in, the probe starts the server and hands it over, and the host reaches
the port itself: inside the container's network namespace when the container has no network (this
engine, as root), else on the engine's network, which the stage evidence then says was not cut."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildscripts.results import Status
from buildscripts.verify import container, host_model, netns, one_image
from buildscripts.verify.container import network_plan
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.plan import Plan
from tests import needs
from tests.integration import tinyimages
from tests.verification import request

STAND_IN = Path(__file__).resolve().parents[1] / "cpu_stand_in"
SITE = "/usr/local/lib/python3.11/dist-packages"
H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)
MODEL = host_model.make(seed=4242)


@pytest.fixture(scope="module")
def stand_in_image(client: docker.DockerClient) -> Iterator[str]:
    try:
        import tokenizers
    except ImportError:
        needs.unavailable("the tokenizers package", "pip install -e '.[test]'")
    files: dict[str, bytes | object] = {"/usr/local/bin/nvidia-smi": (STAND_IN / "bin" / "nvidia-smi").read_bytes()}
    for package in ("torch", "sglang"):
        for path in (STAND_IN / package).glob("*.py"):
            files[f"{SITE}/{package}/{path.name}"] = path.read_bytes()
    source = Path(tokenizers.__file__).parent
    for path in source.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            files[f"{SITE}/tokenizers/{path.relative_to(source)}"] = path.read_bytes()
    tag = tinyimages.derive(client, tinyimages.python_image(client), files)
    yield tag
    client.images.remove(tag, force=True)


@pytest.mark.parametrize(("answer", "reach"), [("reference", "inside"), ("wrong", "inside"), ("reference", "kept")])
def test_the_host_observes_the_server_in_the_container(client: docker.DockerClient, stand_in_image: str,
                                                       tmp_path: Path, answer: str, reach: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_model, "make", lambda model="llama": MODEL)   # tokens the stand-in is told to answer
    if reach == "kept":   # as where the verifier cannot join namespaces: the engine's own network stays
        monkeypatch.setattr(netns, "problem", lambda: "joining a network namespace needs CAP_SYS_ADMIN (root)")
    ids = list(MODEL.reference.output_ids) if answer == "reference" else list(reversed(MODEL.reference.output_ids))
    network, cut_problem = network_plan(client)
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    plan = Plan.make(archs=["sm_90a"], lane_cuda=None, stages=["gpu-visible", "server", "first-generation"],
                     stage_timeout=60)
    asked = request(plan, tmp_path, run_id=run_id, handed=Handed((H200,)), cut_problem=cut_problem,
                    options={"environment": {"SGLANG_TEST_OUTPUT_IDS": json.dumps(ids)}, **network})
    stages = {s.name: s for s in one_image.verify_image(client, stand_in_image, asked)}
    assert container.leftovers(client, run_id) == []
    visible = stages["gpu-visible"]
    assert visible.status is Status.PASSED and visible.where == "container: NVIDIA H200 (sm_90)"
    server = stages["server"]
    assert server.status is Status.PASSED, server
    assert server.evidence["observed_by"] == "host" and server.evidence["seconds_to_ready"] >= 1.0
    assert server.evidence["network"]["cut"] is (cut_problem is None)
    if cut_problem is None:
        assert network == {"network_mode": "none"} and "inside the network namespace" in server.evidence["endpoint"]
    else:
        assert "could not be cut" in server.evidence["warning"] and cut_problem in server.evidence["warning"]
    generation = stages["first-generation"]
    if answer == "reference":
        assert generation.status is Status.PASSED, generation
        assert generation.evidence["generate"]["prompt_ids"] == list(MODEL.reference.prompt_ids)
    else:
        assert generation.status is Status.FAILED and generation.failure_class == "generation-mismatch"
