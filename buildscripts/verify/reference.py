"""The greedy reference decode of the tiny Llama, computed on the host in numpy (float64).

What SGLang (and transformers) compute for a `LlamaForCausalLM` of the tiny model's config: token
embedding; per layer RMSNorm, q/k/v projections, rotary embedding (the "neox" half-split rotation with
rope_theta), grouped-query attention with a causal mask and 1/sqrt(head_dim) scaling, the output
projection and the residual; RMSNorm, the SwiGLU MLP (down(silu(gate(x)) * up(x))) and the residual;
the final RMSNorm and the untied lm_head. Greedy decoding picks the top logit at every step and records
its margin over the runner-up, so a seed whose path nearly ties can be refused before any server runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


def bf16(values: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """`values` rounded to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


@dataclass(frozen=True)
class Shape:
    """The config.json fields the forward pass reads."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    rms_eps: float
    rope_theta: float

    @classmethod
    def of(cls, config: Mapping[str, object]) -> Shape:
        def number(key: str) -> float:
            value = config[key]
            assert isinstance(value, int | float), f"config.json {key} is not a number"
            return float(value)

        return cls(hidden=int(number("hidden_size")), heads=int(number("num_attention_heads")),
                   kv_heads=int(number("num_key_value_heads")), head_dim=int(number("head_dim")),
                   layers=int(number("num_hidden_layers")), rms_eps=number("rms_norm_eps"),
                   rope_theta=number("rope_theta"))


@dataclass(frozen=True)
class Decode:
    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    margins: tuple[float, ...]        # top-1 minus top-2 logit at each step
    spreads: tuple[float, ...]        # the standard deviation of that step's logits (the margin's scale)

    def weakest(self) -> float:
        """The smallest margin of the path, in units of its step's logit spread."""
        return min((m / s for m, s in zip(self.margins, self.spreads, strict=True)), default=float("inf"))


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    normed: Array = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight
    return normed


def rotary(x: Array, positions: npt.NDArray[np.int64], theta: float) -> Array:
    """x: (heads, tokens, head_dim), rotated as Llama does: the two halves of each head form the pairs."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
    first, second = x[..., : dim // 2], x[..., dim // 2:]
    rotated: Array = x * cos + np.concatenate([-second, first], -1) * sin
    return rotated


def attend(q: Array, keys: Array, values: Array) -> Array:
    """One new token's attention over every cached one (the newest included): q (heads, head_dim), keys and
    values (kv_heads, tokens, head_dim); query head h reads key/value head h // (heads // kv_heads)."""
    group = q.shape[0] // keys.shape[0]
    keys, values = np.repeat(keys, group, axis=0), np.repeat(values, group, axis=0)
    scores = np.einsum("hd,htd->ht", q, keys) / np.sqrt(q.shape[-1])
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    out: Array = np.einsum("ht,htd->hd", scores, values).reshape(-1)
    return out


def as_float64(weights: Mapping[str, npt.NDArray[np.floating]]) -> dict[str, Array]:
    """The weights as the forward pass reads them (convert once when decoding several prompts)."""
    return {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}


def silu(x: Array) -> Array:
    out: Array = x / (1.0 + np.exp(-x))
    return out


class Stepwise:
    """A decoder with its caches: `step(ids)` appends tokens and returns the logits after the last one."""

    def step(self, ids: list[int]) -> Array:
        """Logits (vocab,) after `ids`, which follow the tokens given so far. One token at a time, as a
        decoder with a cache runs: the same numbers as a whole prompt at once, and every product a
        matrix-vector one (a multi-threaded BLAS makes small matrix-matrix products slow on a busy machine)."""
        logits = np.zeros(0)
        for token in ids:
            logits = self._token(token)
        return logits

    def _token(self, token: int) -> Array:
        raise NotImplementedError


class Llama(Stepwise):
    """The Llama decoder with a key/value cache."""

    def __init__(self, weights: Mapping[str, npt.NDArray[np.floating]], shape: Shape) -> None:
        self.w = as_float64(weights)   # no copy when they are float64 already
        self.shape = shape
        self.keys: list[Array] = [np.zeros((shape.kv_heads, 0, shape.head_dim)) for _ in range(shape.layers)]
        self.values: list[Array] = [np.zeros((shape.kv_heads, 0, shape.head_dim)) for _ in range(shape.layers)]

    def _attention(self, layer: int, x: Array, position: int) -> Array:
        s, p = self.shape, f"model.layers.{layer}.self_attn."
        q = (x @ self.w[p + "q_proj.weight"].T).reshape(s.heads, 1, s.head_dim)
        k = (x @ self.w[p + "k_proj.weight"].T).reshape(s.kv_heads, 1, s.head_dim)
        v = (x @ self.w[p + "v_proj.weight"].T).reshape(s.kv_heads, 1, s.head_dim)
        at = np.array([position], dtype=np.int64)
        q, k = rotary(q, at, s.rope_theta), rotary(k, at, s.rope_theta)
        self.keys[layer] = np.concatenate([self.keys[layer], k], axis=1)
        self.values[layer] = np.concatenate([self.values[layer], v], axis=1)
        result: Array = attend(q[:, 0], self.keys[layer], self.values[layer]) @ self.w[p + "o_proj.weight"].T
        return result

    def _mlp(self, layer: int, x: Array) -> Array:
        p = f"model.layers.{layer}.mlp."
        gate, up = x @ self.w[p + "gate_proj.weight"].T, x @ self.w[p + "up_proj.weight"].T
        result: Array = (silu(gate) * up) @ self.w[p + "down_proj.weight"].T
        return result

    def _token(self, token: int) -> Array:
        s = self.shape
        position = self.keys[0].shape[1]
        h = self.w["model.embed_tokens.weight"][token]
        for layer in range(s.layers):
            p = f"model.layers.{layer}."
            h = h + self._attention(layer, rms_norm(h, self.w[p + "input_layernorm.weight"], s.rms_eps), position)
            h = h + self._mlp(layer, rms_norm(h, self.w[p + "post_attention_layernorm.weight"], s.rms_eps))
        logits: Array = rms_norm(h, self.w["model.norm.weight"], s.rms_eps) @ self.w["lm_head.weight"].T
        return logits


def greedy(model: Stepwise, prompt_ids: list[int], new_tokens: int,
           keep_going: Callable[[float], bool] = lambda weakest: True) -> Decode:
    """The greedy path of a fresh `model` after `prompt_ids`; stops early when `keep_going(margin / spread)`
    says no (a seed that is refused anyway need not be decoded to its end)."""
    logits = model.step(prompt_ids)
    out: list[int] = []
    margins: list[float] = []
    spreads: list[float] = []
    while len(out) < new_tokens:
        second, first = np.argsort(logits)[-2:]
        out.append(int(first))
        margins.append(float(logits[first] - logits[second]))
        spreads.append(float(np.std(logits)))
        if not keep_going(margins[-1] / spreads[-1]) or len(out) == new_tokens:
            break
        logits = model.step([out[-1]])
    return Decode(tuple(prompt_ids), tuple(out), tuple(margins), tuple(spreads))
