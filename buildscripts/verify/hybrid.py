"""The tiny hybrid (Mamba) model: a NemotronHForCausalLM, its config, its weights and its numpy decoder.

Why NemotronH: SGLang accepts `--mamba-scheduler-strategy extra_buffer` for it (arg_groups/overrides.py
_MAMBA_EXTRA_BUFFER_ARCHS) and serves every piece of it with its own kernels (Mamba2 chunked scan, state
update, causal conv1d and gated RMSNorm in Triton under sglang.kernels; no mamba-ssm, causal-conv1d or
flash-linear-attention package); its layers are one mixer each (Mamba2, attention or a dense MLP), and the
attention has no rotary embedding. Qwen3-Next and Granite-hybrid need MoE layers, FalconH1 runs attention
and Mamba side by side with a dozen muP multipliers. SGLang refuses the triton attention backend for it
(the first layer is not an attention layer): its profile names flashinfer.

The decoder follows the model step by step, as a decoding server does: a pre-norm residual stream
(h + mixer(RMSNorm(h))), the final norm_f and an untied lm_head. A Mamba2 layer: in_proj gives the gate z,
xBC and dt; xBC goes through the depthwise causal conv1d (kernel 4, bias) and SiLU and splits into x, B, C
(B and C per group of heads); dt = softplus(dt + dt_bias) (no clamp: SGLang's dt_limit is (0, inf), and
the config sets mamba_dt_min 0 so that transformers does not clamp either); A = -exp(A_log); the state
(heads, head_dim, d_state) becomes state * exp(dt A) + dt x B; y = state C + D x; then y * silu(z) through
an RMSNorm per group (ngroups groups of intermediate / ngroups) and out_proj. An attention layer: q, k, v
projections, grouped-query attention over every token so far, scaled by 1/sqrt(head_dim), o_proj. An MLP
layer: down(relu(up(x))^2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

from ..probe.tinymodel import VOCAB
from .reference import Array, Stepwise, as_float64, attend, bf16, rms_norm, silu

HIDDEN, PATTERN = 256, "M*-M-"        # Mamba2, attention, MLP, Mamba2, MLP (NemotronH's pattern letters)
HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 4, 2, 64, 512
# Mamba2: 4 heads of 64 (intermediate 256) in 2 groups, d_state 64, conv kernel 4 (what the Triton conv kernel
# is written for), chunks of 128: powers of two of at least 16, as the blocks of the Triton scan's tl.dot need.
M_HEADS, M_HEAD_DIM, M_GROUPS, M_STATE, M_CONV, M_CHUNK = 4, 64, 2, 64, 4, 128
M_INNER = M_HEADS * M_HEAD_DIM
CONV_DIM = M_INNER + 2 * M_GROUPS * M_STATE
EPS = 1e-5
CONFIG = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": VOCAB,
    "hidden_size": HIDDEN, "hybrid_override_pattern": PATTERN, "num_hidden_layers": len(PATTERN),
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
    "intermediate_size": INTERMEDIATE, "mlp_hidden_act": "relu2", "attention_bias": False, "mlp_bias": False,
    "use_bias": False, "mamba_num_heads": M_HEADS, "mamba_head_dim": M_HEAD_DIM,
    # both spellings of the group count: SGLang's config reads `n_groups` for the cache, transformers' either
    "n_groups": M_GROUPS, "mamba_n_groups": M_GROUPS, "ssm_state_size": M_STATE, "mamba_d_conv": M_CONV,
    "mamba_expand": 1, "mamba_hidden_act": "silu", "mamba_conv_bias": True, "use_conv_bias": True,
    "mamba_proj_bias": False, "mamba_chunk_size": M_CHUNK, "mamba_dt_min": 0.0, "use_mamba_kernels": False,
    "layer_norm_epsilon": EPS, "residual_in_fp32": False, "max_position_embeddings": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
    "pad_token_id": 2}
# Projections as the Llama's (the norms before each mixer keep every layer's input at unit scale); the conv
# taps as Mamba's default init (uniform within 1/sqrt(kernel)); dt_bias the inverse softplus of a step in
# [0.01, 0.1] and A_log the log of [1, 16] as Mamba2 initialises them, so that a state keeps some memory.
STD = {"embed": 1.0, "lm_head": 0.25, "layer": 0.08}
SHAPES = {"attention": {"q_proj": (HEADS * HEAD_DIM, HIDDEN), "k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
                        "v_proj": (KV_HEADS * HEAD_DIM, HIDDEN), "o_proj": (HIDDEN, HEADS * HEAD_DIM)},
          "mlp": {"up_proj": (INTERMEDIATE, HIDDEN), "down_proj": (HIDDEN, INTERMEDIATE)},
          "mamba": {"in_proj": (M_INNER + CONV_DIM + M_HEADS, HIDDEN), "out_proj": (HIDDEN, M_INNER)}}
KINDS = {"M": "mamba", "*": "attention", "-": "mlp"}
Weights = dict[str, npt.NDArray[np.float32]]


def draw_weights(rng: np.random.Generator) -> Weights:
    """Checkpoint names as NemotronH's own (backbone.*: SGLang and transformers both map them)."""
    def rand(*shape: int, std: float) -> npt.NDArray[np.float32]:
        return bf16(rng.standard_normal(shape) * std)

    weights = {"backbone.embeddings.weight": rand(VOCAB, HIDDEN, std=STD["embed"]),
               "backbone.norm_f.weight": bf16(np.ones(HIDDEN)),
               "lm_head.weight": rand(VOCAB, HIDDEN, std=STD["lm_head"])}
    for layer, letter in enumerate(PATTERN):
        kind, prefix = KINDS[letter], f"backbone.layers.{layer}."
        weights[prefix + "norm.weight"] = bf16(np.ones(HIDDEN))
        for name, shape in SHAPES[kind].items():
            weights[prefix + f"mixer.{name}.weight"] = rand(*shape, std=STD["layer"])
        if kind == "mamba":
            bound = 1 / np.sqrt(M_CONV)
            step = np.exp(rng.uniform(np.log(0.01), np.log(0.1), M_HEADS))
            weights |= {prefix + "mixer.conv1d.weight": bf16(rng.uniform(-bound, bound, (CONV_DIM, 1, M_CONV))),
                        prefix + "mixer.conv1d.bias": bf16(rng.uniform(-bound, bound, CONV_DIM)),
                        prefix + "mixer.dt_bias": bf16(step + np.log(-np.expm1(-step))),
                        prefix + "mixer.A_log": bf16(np.log(rng.uniform(1, 16, M_HEADS))),
                        prefix + "mixer.D": bf16(np.ones(M_HEADS)),
                        prefix + "mixer.norm.weight": bf16(np.ones(M_INNER))}
    return weights


def softplus(x: Array) -> Array:
    out: Array = np.logaddexp(0.0, x)
    return out


def exact(values: Array) -> Array:
    return values


class NemotronH(Stepwise):
    """The decoder of the tiny hybrid, one token at a time: a conv window and an SSM state per Mamba layer,
    keys and values per attention layer. `rounding` is applied wherever a bf16 server stores a value (every
    product, norm and residual, the caches and the SSM state): the identity for the reference, bf16 to
    measure how far a bf16 server can move the margins (benchmarks/tiny_hybrid.py)."""

    def __init__(self, weights: Mapping[str, npt.NDArray[np.floating]],
                 rounding: Callable[[Array], Array] = exact) -> None:
        self.w = as_float64(weights)
        self.r = rounding
        self.conv = {i: np.zeros((CONV_DIM, M_CONV)) for i, c in enumerate(PATTERN) if c == "M"}
        self.state = {i: np.zeros((M_HEADS, M_HEAD_DIM, M_STATE)) for i, c in enumerate(PATTERN) if c == "M"}
        self.keys = {i: np.zeros((KV_HEADS, 0, HEAD_DIM)) for i, c in enumerate(PATTERN) if c == "*"}
        self.values = {i: np.zeros((KV_HEADS, 0, HEAD_DIM)) for i, c in enumerate(PATTERN) if c == "*"}

    def _token(self, token: int) -> Array:
        h = self.w["backbone.embeddings.weight"][token]
        for layer, letter in enumerate(PATTERN):
            p = f"backbone.layers.{layer}."
            x = self.r(rms_norm(h, self.w[p + "norm.weight"], EPS))
            mixer = {"M": self._mamba, "*": self._attention, "-": self._mlp}[letter]
            h = self.r(h + self.r(mixer(layer, x, p + "mixer.")))
        logits: Array = self.r(rms_norm(h, self.w["backbone.norm_f.weight"], EPS)) @ self.w["lm_head.weight"].T
        return logits

    def _mamba(self, layer: int, x: Array, p: str) -> Array:
        z, xbc, dt = np.split(self.r(x @ self.w[p + "in_proj.weight"].T), [M_INNER, M_INNER + CONV_DIM])
        window = np.concatenate([self.conv[layer][:, 1:], xbc[:, None]], axis=1)   # the last M_CONV inputs
        self.conv[layer] = window
        xbc = self.r(silu((window * self.w[p + "conv1d.weight"][:, 0, :]).sum(-1) + self.w[p + "conv1d.bias"]))
        xs, b, c = np.split(xbc, [M_INNER, M_INNER + M_GROUPS * M_STATE])
        per_group = M_HEADS // M_GROUPS                     # head i reads group i // per_group of B and C
        b = np.repeat(b.reshape(M_GROUPS, M_STATE), per_group, axis=0)
        c = np.repeat(c.reshape(M_GROUPS, M_STATE), per_group, axis=0)
        xs = xs.reshape(M_HEADS, M_HEAD_DIM)
        dt = softplus(dt + self.w[p + "dt_bias"])
        decay = np.exp(dt * -np.exp(self.w[p + "A_log"]))
        state = self.state[layer] * decay[:, None, None] + (dt[:, None] * xs)[:, :, None] * b[:, None, :]
        self.state[layer] = state = self.r(state)
        y = self.r(np.einsum("hpn,hn->hp", state, c) + self.w[p + "D"][:, None] * xs).reshape(-1) * silu(z)
        groups = y.reshape(M_GROUPS, -1)
        y = (groups / np.sqrt(np.mean(groups * groups, -1, keepdims=True) + EPS)).reshape(-1)
        out: Array = self.r(y * self.w[p + "norm.weight"]) @ self.w[p + "out_proj.weight"].T
        return out

    def _attention(self, layer: int, x: Array, p: str) -> Array:
        q = self.r(x @ self.w[p + "q_proj.weight"].T).reshape(HEADS, HEAD_DIM)
        k = self.r(x @ self.w[p + "k_proj.weight"].T).reshape(KV_HEADS, 1, HEAD_DIM)
        v = self.r(x @ self.w[p + "v_proj.weight"].T).reshape(KV_HEADS, 1, HEAD_DIM)
        self.keys[layer] = np.concatenate([self.keys[layer], k], axis=1)
        self.values[layer] = np.concatenate([self.values[layer], v], axis=1)
        out: Array = self.r(attend(q, self.keys[layer], self.values[layer])) @ self.w[p + "o_proj.weight"].T
        return out

    def _mlp(self, layer: int, x: Array, p: str) -> Array:
        up = self.r(np.maximum(x @ self.w[p + "up_proj.weight"].T, 0.0))
        out: Array = self.r(up * up) @ self.w[p + "down_proj.weight"].T
        return out
