"""Per-GPU mode in host mode: one probe per GPU, side by side, each pinned with CUDA_VISIBLE_DEVICES.

  python -m probe.pergpu --gpus 0,1 --out-dir DIR -- [probe arguments]

Each GPU's results go to DIR/gpu<i>.json and its work files to <workdir>-gpu<i>; every probe
picks its own free server port. This is what a user with one server per GPU runs (stdlib only).
Run alone, without a verifier to observe them, the probes skip the server stages (probe/serving.py):
the GPU-side checks up to kernel-smoke are what this shows; `verify` judges servers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List


def run(gpus: List[str], out_dir: str, probe_args: List[str], workdir: str) -> List[Dict[str, Any]]:
    package = __package__ or "probe"  # "buildscripts.probe" on a host, "probe" inside an image
    os.makedirs(out_dir, exist_ok=True)
    started, procs = time.monotonic(), []
    for gpu in gpus:
        out = os.path.join(out_dir, f"gpu{gpu}.json")
        argv = [sys.executable, "-m", package, *probe_args, "--out", out, "--workdir", f"{workdir}-gpu{gpu}"]
        log = open(os.path.join(out_dir, f"gpu{gpu}.log"), "w")  # noqa: SIM115 - closed below
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, PYTHONUNBUFFERED="1")
        procs.append((gpu, out, log, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)))
    summary = []
    for gpu, out, log, proc in procs:
        code = proc.wait()
        log.close()
        results = []
        if os.path.exists(out):
            with open(out) as fh:
                results = json.load(fh)
        summary.append({"gpu": gpu, "exit_code": code, "seconds": round(time.monotonic() - started, 1),
                        "stages": {r["name"]: r["status"] for r in results},
                        "times": {r["name"]: r.get("evidence", {}).get("seconds_to_ready")
                                  for r in results if r["name"] == "server"}})
    return summary


def main(argv: List[str]) -> int:
    if "--" in argv:
        own, probe_args = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    else:
        own, probe_args = argv, []
    ap = argparse.ArgumentParser(prog="probe.pergpu")
    ap.add_argument("--gpus", required=True, help="comma-separated GPU indexes, e.g. 0,1")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--workdir", default="/tmp/probe")
    a = ap.parse_args(own)
    summary = run([g for g in a.gpus.split(",") if g], a.out_dir, probe_args, a.workdir)
    print(json.dumps(summary, indent=1))
    return 0 if all(s["exit_code"] == 0 for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
