"""The host's numpy reference decodes (verify/reference.py, verify/hybrid.py) against the image's own torch and
transformers on the CPU, for the same fresh weights: the cross-check that what the host expects is what a
Llama, or a NemotronH hybrid, of that config computes (float32), and that the margins it insists on survive
bf16 (what the server computes in). transformers decodes the whole sequence at every step (the hybrid's Mamba
layers through its chunked scan), the host one token at a time with its caches (the Mamba recurrence): two
ways to the same numbers; and SGLang's own NemotronH config reads the hybrid's config.json as the host means
it. Uses the newest SGLang image already in the engine (the hybrid needs the
transformers of SGLang 0.5.16 or later: older ones do not know NemotronH's MLP layers), else the one this
session builds."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest
from packaging.version import Version

from buildscripts import platform_reading
from buildscripts.matrix.schema import LABEL_PREFIX
from buildscripts.verify import host_model, hybrid

DECODE = r"""
import glob, json, torch
from transformers import AutoModelForCausalLM
out = {}
for folder in sorted(glob.glob("/m/seed-*")):
    ref = json.load(open(folder + "/ask.json"))
    for dtype in ("float32", "bfloat16"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
        ids, got, margins = list(ref["prompt_ids"]), [], []
        with torch.no_grad():
            for _ in range(ref["new_tokens"]):
                logits = model(torch.tensor([ids])).logits[0, -1].double()
                top = torch.topk(logits, 2)
                got.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
                ids.append(got[-1])
        out.setdefault(folder, {})[dtype] = {"output_ids": got, "margins": margins}
print("@@json " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def sglang_image(request: pytest.FixtureRequest) -> str:
    client = docker.from_env()
    try:   # this machine's platform only: an image of another (an arm64 cell here) would run under emulation
        here = platform_reading.machine().split("/")[1]
        present = [i for i in client.images.list(filters={"label": f"{LABEL_PREFIX}.sglang"})
                   if platform_reading.normalised(f"linux/{i.attrs.get('Architecture')}").split("/")[1] == here]
    finally:
        client.close()
    if present:
        newest = max(present, key=lambda image: Version(image.labels[f"{LABEL_PREFIX}.sglang"]))
        return str(newest.id)
    run = request.getfixturevalue("run")   # this session's build of the e2e cells
    return next(str(c.image.id) for c in run.cells if c.image.id)


@pytest.mark.parametrize("kind", ["llama", "llama-tp", "hybrid"])
def test_the_numpy_reference_is_what_transformers_computes(kind: str, sglang_image: str, tmp_path: Path) -> None:
    models = {}
    for n in range(3):
        model = host_model.make(model=kind)
        written = model.write(tmp_path / f"seed-{n}")
        (written / "ask.json").write_text(json.dumps({"prompt_ids": list(model.reference.prompt_ids),
                                                     "new_tokens": len(model.reference.output_ids)}))
        models[f"/m/seed-{n}"] = model
    client = docker.from_env()
    try:
        output = client.containers.run(sglang_image, ["-c", DECODE], entrypoint="python3", network_mode="none",
                                       volumes={str(tmp_path): {"bind": "/m", "mode": "ro"}}, remove=True,
                                       environment={"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}).decode()
    finally:
        client.close()
    found = json.loads(next(line for line in output.splitlines() if line.startswith("@@json "))[7:])
    for folder, model in models.items():
        want = model.reference
        exact, bf16 = found[folder]["float32"], found[folder]["bfloat16"]
        assert exact["output_ids"] == list(want.output_ids), f"{kind} seed {model.seed}"
        assert exact["margins"] == pytest.approx(list(want.margins), abs=1e-3)
        assert bf16["output_ids"] == list(want.output_ids), f"{kind} seed {model.seed}: bf16 took another path"


SGLANG_CONFIG = r"""
import json
from sglang.srt.configs import NemotronHConfig
c = NemotronHConfig.from_pretrained("/m")
print("@@json " + json.dumps({"pattern": c.hybrid_override_pattern, "mamba": c.mamba_layer_ids,
                              "attention": c.full_attention_layer_ids, "n_groups": c.n_groups,
                              "chunk": c.mamba_chunk_size, "conv_bias": c.use_conv_bias, "bias": c.use_bias}))
"""


def test_sglang_reads_the_hybrid_config_as_the_host_means_it(sglang_image: str, tmp_path: Path) -> None:
    """The fields SGLang's own NemotronH config takes from config.json (its cache shapes need `n_groups`)."""
    host_model.make(model="hybrid").write(tmp_path)
    client = docker.from_env()
    try:
        output = client.containers.run(sglang_image, ["-c", SGLANG_CONFIG], entrypoint="python3", network_mode="none",
                                       volumes={str(tmp_path): {"bind": "/m", "mode": "ro"}}, remove=True,
                                       environment={"CUDA_VISIBLE_DEVICES": ""}).decode()
    finally:
        client.close()
    found = json.loads(next(line for line in output.splitlines() if line.startswith("@@json "))[7:])
    assert found == {"pattern": hybrid.PATTERN, "mamba": [0, 3], "attention": [1], "n_groups": hybrid.M_GROUPS,
                     "chunk": hybrid.M_CHUNK, "conv_bias": True, "bias": False}
