"""A tiny random-weight Llama made inside the image, and its greedy decode on the CPU.

Run as a script with the image's own Python (which has torch, safetensors, tokenizers and
transformers, because SGLang needs them); nothing is downloaded from a model hub:

  python tinymodel.py make OUT_DIR
  python tinymodel.py reference MODEL_DIR --prompt TEXT --max-new-tokens N   -> one JSON line

The model is deliberately small (2 layers, hidden 256, vocab 512) so that it loads in seconds,
and its output head is scaled up so that greedy choices are decided by clear logit margins:
a GPU decode that differs from the CPU decode then means a kernel computed something wrong,
not that two nearly equal logits swapped places under bf16 rounding.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

SEED = 1234
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 256, 512, 2, 4, 2, 64, 512
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>"]
# One token each, as in the reasoning models SGLang's reasoning parsers are written for: the `reasoning`
# profile (`--reasoning-parser qwen3`) refuses to start when `</think>` does not encode to one token.
THINK = ["<think>", "</think>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _corpus() -> List[str]:
    """A fixed pseudo-language, so the tokenizer's merges are the same on every machine."""
    import random

    rng = random.Random(SEED)
    stems = ["an", "bor", "cel", "dim", "esk", "fa", "gul", "hin", "ir", "jo", "kel", "lum", "mo", "nir",
             "os", "pra", "qui", "ru", "sa", "tor", "ul", "vin", "wo", "xe", "yl", "zu"]
    return [" ".join("".join(rng.choice(stems) for _ in range(rng.randint(1, 3))) for _ in range(16))
            for _ in range(3000)]


def make_tokenizer(out: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # type: ignore[import-not-found]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 8, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 0)])
    tok.add_tokens(THINK)  # plain added tokens: they stay in decoded text, where the parser looks for them
    # Pad with reserved tokens so that the tokenizer's vocabulary is exactly the model's.
    tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(VOCAB - tok.get_vocab_size())])
    if tok.get_vocab_size() != VOCAB:
        msg = f"tokenizer has {tok.get_vocab_size()} tokens, the model {VOCAB}"
        raise SystemExit(msg)
    unsplit = [t for t in THINK if len(tok.encode(t, add_special_tokens=False).ids) != 1]
    if unsplit:
        msg = f"tokenizer splits {unsplit}: the reasoning parser needs one token each"
        raise SystemExit(msg)
    tok.save(os.path.join(out, "tokenizer.json"))
    _write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIALS[0], "eos_token": SPECIALS[1],
        "pad_token": SPECIALS[2], "model_max_length": 4096, "chat_template": CHAT_TEMPLATE})
    _write_json(os.path.join(out, "special_tokens_map.json"),
                {"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[2]})


def make_weights(out: str) -> None:
    import torch  # type: ignore[import-not-found]
    from safetensors.torch import save_file  # type: ignore[import-not-found]

    gen = torch.Generator().manual_seed(SEED)

    def rand(*shape: int, std: float = 0.02) -> Any:
        return (torch.randn(*shape, generator=gen) * std).to(torch.bfloat16)

    ones = torch.ones(HIDDEN, dtype=torch.bfloat16)
    tensors = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN, std=1.0),
               "model.norm.weight": ones.clone(), "lm_head.weight": rand(VOCAB, HIDDEN, std=0.25)}
    shapes = {"self_attn.q_proj": (HEADS * HEAD_DIM, HIDDEN),
              "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
              "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
              "self_attn.o_proj": (HIDDEN, HEADS * HEAD_DIM),
              "mlp.gate_proj": (INTERMEDIATE, HIDDEN), "mlp.up_proj": (INTERMEDIATE, HIDDEN),
              "mlp.down_proj": (HIDDEN, INTERMEDIATE)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        tensors[prefix + "input_layernorm.weight"] = ones.clone()
        tensors[prefix + "post_attention_layernorm.weight"] = ones.clone()
        for name, shape in shapes.items():
            tensors[prefix + name + ".weight"] = rand(*shape, std=0.08)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(out, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB,
        "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2})
    _write_json(os.path.join(out, "generation_config.json"), {"bos_token_id": 0, "eos_token_id": 1})


def make(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    make_tokenizer(out)
    make_weights(out)
    size = sum(os.path.getsize(os.path.join(out, name)) for name in os.listdir(out))
    print(json.dumps({"model": out, "bytes": size}))


def reference(model_dir: str, prompt: str, max_new_tokens: int) -> Dict[str, Any]:
    """Greedy decode on the CPU in float32, with each step's margin between the best two logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # type: ignore[import-not-found]

    torch.manual_seed(SEED)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).float().eval()
    ids = tok(prompt)["input_ids"]
    prompt_ids, out_ids, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2)
            out_ids.append(int(top.indices[0]))
            margins.append(round(float(top.values[0] - top.values[1]), 4))
            ids.append(out_ids[-1])
    return {"prompt_ids": prompt_ids, "output_ids": out_ids, "margins": margins,
            "text": tok.decode(out_ids), "dtype": "float32", "device": "cpu"}


def _write_json(path: str, data: Dict[str, Any]) -> None:
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1)


def main(argv: List[str]) -> int:
    if len(argv) >= 2 and argv[0] == "make":
        make(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "reference":
        import argparse

        ap = argparse.ArgumentParser(prog="tinymodel reference")
        ap.add_argument("model")
        ap.add_argument("--prompt", required=True)
        ap.add_argument("--max-new-tokens", type=int, default=16)
        a = ap.parse_args(argv[1:])
        print(json.dumps(reference(a.model, a.prompt, a.max_new_tokens)))
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
