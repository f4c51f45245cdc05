"""How far a bf16 server can move the greedy margins of the tiny hybrid (NemotronH) model.

    python benchmarks/tiny_hybrid.py [--seeds 20] [--out benchmarks/tiny-hybrid-results.md]

For fresh models made as the verifier makes them (buildscripts/verify/host_model.py, model "hybrid"), the
reference path (float64) is decoded again with every stored value rounded to bf16 as the server stores it
(every product, norm and residual, the key/value cache, the conv window and the SSM state:
`--mamba-ssm-dtype bfloat16`), fed the reference's own tokens. Per step: the top-1/top-2 gap of the
reference's two tokens in units of the step's logit spread, exact minus rounded. The margin the verifier
asks (host_model.MIN_MARGIN) should be at least twice the largest shift seen here.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from buildscripts.verify import host_model, hybrid  # noqa: E402
from buildscripts.verify.reference import Array, as_float64, bf16  # noqa: E402


def rounded(values: Array) -> Array:
    return bf16(values).astype(np.float64)


def shifts(model: host_model.TinyModel) -> list[float]:
    ref = model.reference
    decoder = hybrid.NemotronH(as_float64(model.weights), rounding=rounded)
    logits = decoder.step(list(ref.prompt_ids))
    found = []
    for token, margin, spread in zip(ref.output_ids, ref.margins, ref.spreads, strict=True):
        runner_up = int(np.argsort(logits)[-2]) if int(np.argmax(logits)) == token else int(np.argmax(logits))
        found.append(abs(margin / spread - (logits[token] - logits[runner_up]) / float(np.std(logits))))
        logits = decoder.step([token])
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "tiny-hybrid-results.md")
    a = ap.parse_args()
    per_step: list[float] = []
    for seed in range(a.seeds):
        per_step += shifts(host_model.make(seed=seed, model="hybrid"))
    lines = ["# bf16 against the tiny hybrid's margins (`benchmarks/tiny_hybrid.py`)", "",
             f"Measured {datetime.date.today()} on a CPU machine: Python {platform.python_version()}, "
             f"numpy {np.__version__}; {a.seeds} models (seeds 0-{a.seeds - 1}), "
             f"{len(per_step)} greedy steps; shift = |exact - bf16-rounded| top-1/top-2 gap in units of the step's "
             "logit standard deviation.", "",
             "| median shift | 99th percentile | largest | margin asked (host_model.MIN_MARGIN) |",
             "| ---: | ---: | ---: | ---: |",
             f"| {statistics.median(per_step):.4f} | {np.percentile(per_step, 99):.4f} | {max(per_step):.4f} "
             f"| {host_model.MIN_MARGIN} |", ""]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
