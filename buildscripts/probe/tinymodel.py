"""The tokenizer of the tiny models, made inside the image, and the Llama's dimensions (the hybrid's are the
host's, verify/hybrid.py: both have VOCAB tokens, so one tokenizer serves either).

  python tinymodel.py tokenizer OUT_DIR

Run as a script with the image's own Python (its `tokenizers` package, which SGLang needs); nothing is
downloaded from a model hub. The weights, config.json and the expected tokens are the host's
(buildscripts/verify/host_model.py: fresh weights every run): the host asks the server with token ids
and compares token ids, so the tokenizer only has to exist (for the server's start and the chat request)
and to have exactly VOCAB tokens.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

SEED = 1234   # of the tokenizer's training corpus (the weights are drawn afresh by the host)
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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

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


def tokenizer(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    make_tokenizer(out)
    print(json.dumps({"tokenizer": out, "vocab": VOCAB}))


def _write_json(path: str, data: Dict[str, Any]) -> None:
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1)


def main(argv: List[str]) -> int:
    if len(argv) == 2 and argv[0] == "tokenizer":
        tokenizer(argv[1])
        return 0
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
