"""The tiny hybrid model (verify/hybrid.py) the host makes for a profile with `model: hybrid`: its checkpoint
is what SGLang's NemotronH loader reads, its decoder agrees with itself and with an independent Mamba2 sum,
its path survives bf16, and the profile reaches the maker. The decoder against the image's own transformers:
tests/e2e/test_reference_decode.py."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
from safetensors.numpy import load

from buildscripts.matrix import load as load_matrix
from buildscripts.matrix.schema import Profile, TinyModelName
from buildscripts.probe.tinymodel import VOCAB
from buildscripts.verify import host_model, hybrid, runner
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.plan import Plan
from buildscripts.verify.reference import Array, as_float64, bf16

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def model() -> host_model.TinyModel:
    """The tests' tiny hybrid, made when a test first asks (not at collection, where every worker would make
    it), of a seed whose first draw has clear margins: seed 11 took 196 draws, 3.9 s."""
    return host_model.make(seed=98, model="hybrid")


H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)


def test_the_checkpoint_is_a_nemotron_h_of_bf16_values() -> None:
    files = model().files()
    config = json.loads(files["config.json"])
    assert config["architectures"] == ["NemotronHForCausalLM"] and config["vocab_size"] == VOCAB
    assert config["hybrid_override_pattern"] == "M*-M-" and config["n_groups"] == config["mamba_n_groups"] == 2
    tensors = load(files["model.safetensors"])
    assert set(tensors) == set(model().weights)
    for name, value in tensors.items():
        assert name.startswith(("backbone.", "lm_head.")), name   # NemotronH's own names: both loaders map them
        assert value.dtype == np.float32 and not (value.view(np.uint32) & 0xFFFF).any(), name
    mamba = "backbone.layers.0.mixer."
    assert tensors[mamba + "in_proj.weight"].shape == (hybrid.M_INNER + hybrid.CONV_DIM + hybrid.M_HEADS, hybrid.HIDDEN)
    assert tensors[mamba + "conv1d.weight"].shape == (hybrid.CONV_DIM, 1, hybrid.M_CONV)
    assert {n for n in tensors if n.startswith("backbone.layers.2.")} == {
        "backbone.layers.2.norm.weight", "backbone.layers.2.mixer.up_proj.weight",
        "backbone.layers.2.mixer.down_proj.weight"}
    assert model().evidence()["architecture"] == "NemotronHForCausalLM"


def test_a_seed_draws_the_same_hybrid_with_clear_margins() -> None:
    again = host_model.make(seed=98, model="hybrid")
    assert again.reference == model().reference and len(model().reference.output_ids) == host_model.NEW_TOKENS
    assert model().reference.weakest() >= host_model.MIN_MARGIN
    assert model().reference != host_model.make(seed=98).reference   # the Llama of the same seed is another model


def test_the_whole_sequence_at_once_gives_the_same_next_token() -> None:
    ids = [*model().reference.prompt_ids, *model().reference.output_ids[:-1]]
    start = len(model().reference.prompt_ids)
    for i in (start, start + 5, len(ids)):
        logits = hybrid.NemotronH(model().weights).step(ids[:i])
        assert int(np.argmax(logits)) == model().reference.output_ids[i - start]


def unrolled_mamba2(x: Array, w: dict[str, Array], p: str) -> Array:
    """A Mamba2 mixer over a whole sequence x (tokens, hidden) without a running state: y_t = sum over s <= t of
    C_t . B_s dt_s x_s exp(A (dt_{s+1} + ... + dt_t)) + D x_t (the SSD form), the conv as a padded window."""
    proj = x @ w[p + "in_proj.weight"].T
    z, xbc, dt = proj[:, :hybrid.M_INNER], proj[:, hybrid.M_INNER:-hybrid.M_HEADS], proj[:, -hybrid.M_HEADS:]
    padded = np.concatenate([np.zeros((hybrid.M_CONV - 1, hybrid.CONV_DIM)), xbc])
    taps = w[p + "conv1d.weight"][:, 0, :]
    conv = np.stack([(padded[t:t + hybrid.M_CONV].T * taps).sum(-1) for t in range(len(x))]) + w[p + "conv1d.bias"]
    conv = conv / (1 + np.exp(-conv))
    xs = conv[:, :hybrid.M_INNER].reshape(len(x), hybrid.M_HEADS, hybrid.M_HEAD_DIM)
    group_of = np.arange(hybrid.M_HEADS) // (hybrid.M_HEADS // hybrid.M_GROUPS)
    b = conv[:, hybrid.M_INNER:hybrid.M_INNER + hybrid.M_GROUPS * hybrid.M_STATE].reshape(len(x), hybrid.M_GROUPS, -1)
    c = conv[:, hybrid.M_INNER + hybrid.M_GROUPS * hybrid.M_STATE:].reshape(len(x), hybrid.M_GROUPS, -1)
    dt = np.log1p(np.exp(dt + w[p + "dt_bias"]))
    a = -np.exp(w[p + "A_log"])
    cum = np.cumsum(dt, axis=0)
    y = np.zeros_like(xs)
    for t in range(len(x)):
        for s in range(t + 1):
            weight = np.exp(a * (cum[t] - cum[s])) * dt[s] * (c[t][group_of] * b[s][group_of]).sum(-1)
            y[t] += weight[:, None] * xs[s]
    y = (y + w[p + "D"][:, None] * xs).reshape(len(x), -1) * (z / (1 + np.exp(-z)))
    groups = y.reshape(len(x), hybrid.M_GROUPS, -1)
    y = (groups / np.sqrt((groups ** 2).mean(-1, keepdims=True) + hybrid.EPS)).reshape(len(x), -1)
    out: Array = (y * w[p + "norm.weight"]) @ w[p + "out_proj.weight"].T
    return out


def test_the_mamba_recurrence_is_the_unrolled_sum() -> None:
    w = as_float64(model().weights)
    x = np.random.default_rng(3).standard_normal((7, hybrid.HIDDEN))
    decoder = hybrid.NemotronH(w)
    stepwise = np.stack([decoder._mamba(0, row, "backbone.layers.0.mixer.") for row in x])
    assert np.allclose(stepwise, unrolled_mamba2(x, w, "backbone.layers.0.mixer."), rtol=1e-9, atol=1e-9)


def test_the_path_survives_bf16_everywhere_the_server_stores_a_value() -> None:
    ref = model().reference
    decoder = hybrid.NemotronH(model().weights, rounding=lambda v: bf16(v).astype(np.float64))
    logits, got = decoder.step(list(ref.prompt_ids)), []
    for token in ref.output_ids:
        got.append(int(np.argmax(logits)))
        logits = decoder.step([token])
    assert tuple(got) == ref.output_ids


def test_a_profile_names_the_tiny_model_and_the_plan_carries_it_to_the_maker() -> None:
    assert set(get_args(TinyModelName)) == set(host_model.ARCHITECTURES)
    assert Profile().model == "llama"
    with pytest.raises(ValueError, match="llama"):
        Profile.model_validate({"model": "mamba"})
    plan = Plan.make(archs=["sm_90a"], lane_cuda="13.0", stages=["gpu-visible", "server"],
                     profile=Profile(model="hybrid"), profile_name="hybrid")
    assert plan.server_model == "hybrid"
    options = runner.Options(plan=plan, log_file=Path("unused.log"), handed=Handed(gpus=(H200,)))
    made = runner.model_for(options)
    assert made is not None and made.architecture == "NemotronHForCausalLM"
    assert runner.model_for(runner.Options(plan=plan, log_file=Path("unused.log"))) is None   # no GPU: no model


def test_the_matrix_hybrid_profile_serves_the_seed_flags_and_is_not_baked() -> None:
    spec = load_matrix(ROOT / "matrix.yaml", env={}).spec
    profile = spec.profiles["hybrid"]
    assert profile.model == "hybrid"
    args = list(profile.args)
    assert args[args.index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
    assert args[args.index("--mamba-ssm-dtype") + 1] == "bfloat16"
    assert args[args.index("--attention-backend") + 1] != "triton"   # SGLang refuses triton for NemotronH
    assert all(p.model != "hybrid" for name, p in spec.profiles.items() if name != "hybrid")
    assert not any("hybrid" in t.warm_profiles for t in spec.toolkits.values())
