"""The tiny model of the server stages, made fresh by the host for every verification.

A new random seed per run draws the weights (numpy), rounded to bf16 and stored as float32 in
model.safetensors, so that the server's cast to bf16 changes nothing; config.json describes the model: by
default a LlamaForCausalLM (2 layers, hidden 256, vocab 512: it loads in seconds; `llama-tp` the same with
8 attention heads, to split over 2, 4 or 8 GPUs), for a profile with
`model: hybrid` the NemotronH hybrid of Mamba2, attention and MLP layers (hybrid.py). The host computes the greedy
reference decode itself (reference.py) and refuses a seed whose path has a step where the best two
logits are close: the GPU computes in bf16, and a near-tie could go either way with every kernel right.
The output head is scaled up so that most steps are decided by clear margins. The image adds only the
tokenizer (probe/tinymodel.py), which decides nothing here: the request carries token ids and the
answer is compared as token ids, so an image cannot know the expected tokens before its server runs.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import save

from ..errors import ConfigError
from ..probe.tinymodel import HEAD_DIM, HEADS, HIDDEN, INTERMEDIATE, KV_HEADS, LAYERS, VOCAB
from . import hybrid
from .reference import Array, Decode, Llama, Shape, Stepwise, as_float64, bf16, greedy

NEW_TOKENS = 16
PROMPT_TOKENS = 8                 # after the BOS token, drawn from the ordinary (non-special) ids
FIRST_ID, LAST_ID = 3, 256        # 0-2 are <|bos|> <|eos|> <|pad|>; the high ids are reserved tokens
# The weakest step's margin, in units of that step's logit standard deviation. Emulating bf16 rounding
# after every operation of the Llama (numpy, 160 steps of 10 seeds) moved a top-1/top-2 gap by 0.01 of
# that unit typically and by 0.047 at most; of the hybrid, its SSM state in bf16 too, by 0.010 typically
# and 0.043 at most (320 steps of 20 seeds, benchmarks/tiny-hybrid-results.md): 0.1 leaves twice the worst.
MIN_MARGIN = 0.1
# About 1 path in 90 passes. A refused path stops at its first weak step, and the weights (the costly part)
# are drawn again only after PROMPTS_PER_WEIGHTS prompts: a few seconds in all.
MAX_DRAWS, PROMPTS_PER_WEIGHTS = 5000, 25
STD = {"embed": 1.0, "lm_head": 0.25, "layer": 0.08}
# Tensor parallelism splits the attention heads (and the MLP) over the GPUs: the `llama-tp` model has 8
# heads, so tp 2, 4 and 8 (two, four or eight GPUs of a node) split it evenly; the default Llama keeps its 4,
# which the baked kernel caches were recorded for.
TP_HEADS = 8


def llama_config(heads: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB,
        "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
        "num_attention_heads": heads, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}


CONFIG = llama_config(HEADS)
CONFIG_TP = llama_config(TP_HEADS)


def shapes(heads: int) -> dict[str, tuple[int, int]]:
    return {"self_attn.q_proj": (heads * HEAD_DIM, HIDDEN), "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
            "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN), "self_attn.o_proj": (HIDDEN, heads * HEAD_DIM),
            "mlp.gate_proj": (INTERMEDIATE, HIDDEN), "mlp.up_proj": (INTERMEDIATE, HIDDEN),
            "mlp.down_proj": (HIDDEN, INTERMEDIATE)}


Weights = dict[str, npt.NDArray[np.float32]]


def draw_weights(rng: np.random.Generator, heads: int = HEADS) -> Weights:
    def rand(*shape: int, std: float) -> npt.NDArray[np.float32]:
        return bf16(rng.standard_normal(shape) * std)

    ones = np.ones(HIDDEN, dtype=np.float32)
    weights = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN, std=STD["embed"]),
               "model.norm.weight": ones.copy(), "lm_head.weight": rand(VOCAB, HIDDEN, std=STD["lm_head"])}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        weights[prefix + "input_layernorm.weight"] = ones.copy()
        weights[prefix + "post_attention_layernorm.weight"] = ones.copy()
        for name, shape in shapes(heads).items():
            weights[prefix + name + ".weight"] = rand(*shape, std=STD["layer"])
    return weights


@dataclass(frozen=True)
class Architecture:
    """What the host makes a tiny model of: its config.json, how its weights are drawn, its decoder."""

    config: Mapping[str, object]
    draw: Callable[[np.random.Generator], Weights]
    decoder: Callable[[Mapping[str, Array]], Stepwise]


# By a profile's `model:` (matrix.yaml); the names are the schema's (matrix/schema.py TinyModelName).
ARCHITECTURES = {
    "llama": Architecture(CONFIG, draw_weights, lambda w: Llama(w, Shape.of(CONFIG))),
    "llama-tp": Architecture(CONFIG_TP, lambda rng: draw_weights(rng, TP_HEADS),
                             lambda w: Llama(w, Shape.of(CONFIG_TP))),
    "hybrid": Architecture(hybrid.CONFIG, hybrid.draw_weights, hybrid.NemotronH)}


@dataclass(frozen=True)
class TinyModel:
    """Fresh weights, the prompt and the greedy path the host expects from them."""

    seed: int
    draws: int                       # paths tried until one had clear margins everywhere
    weights: Weights = field(repr=False)
    reference: Decode
    config: Mapping[str, object] = field(default_factory=lambda: CONFIG, repr=False)

    def files(self) -> dict[str, bytes]:
        """The checkpoint, by file name (the tokenizer is added beside them in the image)."""
        return {"config.json": json.dumps(self.config, indent=1).encode(),
                "generation_config.json": json.dumps({"bos_token_id": 0, "eos_token_id": 1}).encode(),
                "model.safetensors": save(dict(self.weights), metadata={"format": "pt"})}

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in self.files().items():
            (folder / name).write_bytes(data)
        return folder

    @property
    def architecture(self) -> str:
        names = self.config["architectures"]
        assert isinstance(names, list)
        return str(names[0])

    def evidence(self) -> dict[str, object]:
        ref = self.reference
        return {"architecture": self.architecture, "seed": self.seed, "seeds_drawn": self.draws,
                "prompt_ids": list(ref.prompt_ids), "output_ids": list(ref.output_ids),
                "margins": [round(m, 4) for m in ref.margins], "weakest_margin": round(ref.weakest(), 4),
                "computed_by": "host (numpy, float64)"}


def make(seed: int | None = None, *, model: str = "llama", min_margin: float = MIN_MARGIN,
         max_draws: int = MAX_DRAWS) -> TinyModel:
    """The first weights and prompt of the `model` architecture drawn from `seed` (else from fresh entropy)
    whose greedy path has every margin >= min_margin; the same seed draws the same model again."""
    arch = ARCHITECTURES[model]
    first = secrets.randbits(63) if seed is None else seed
    rng = np.random.default_rng(first)
    weights = arch.draw(rng)
    exact = as_float64(weights)
    for draw in range(max_draws):
        if draw and draw % PROMPTS_PER_WEIGHTS == 0:
            weights = arch.draw(rng)
            exact = as_float64(weights)
        prompt = [0, *(int(i) for i in rng.integers(FIRST_ID, LAST_ID, PROMPT_TOKENS))]
        path = greedy(arch.decoder(exact), prompt, NEW_TOKENS, keep_going=lambda weakest: weakest >= min_margin)
        if len(path.output_ids) == NEW_TOKENS and path.weakest() >= min_margin:
            return TinyModel(seed=first, draws=draw + 1, weights=weights, reference=path, config=arch.config)
    msg = f"no seed of {max_draws} drawn from {first} gave the tiny model clear margins (>= {min_margin}, {model})"
    raise ConfigError(msg, hint="lower MIN_MARGIN in buildscripts/verify/host_model.py only with a measurement")
