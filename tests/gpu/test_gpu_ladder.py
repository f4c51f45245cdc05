"""The GPU stages for real, in host mode, against the SGLang installed in this Python.

Needs an NVIDIA GPU and SGLang; skipped with the reason otherwise. This is what was run on an H200
test machine for evidence/h200-2026-11-29 (there through evidence/.../run.sh).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU (nvidia-smi not found)"),
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="SGLang is not installed here"),
]


def test_gpu_ladder_verifies_this_environment(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    args = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--disable-cuda-graph"]
    subprocess.run([sys.executable, "-m", "buildscripts.probe", "--mode", "host", "--archs", "sm_90a,sm_100a,sm_120a",
                    "--stages", "gpu-visible,kernel-smoke,server,first-generation", "--stage-timeout", "900",
                    "--workdir", str(tmp_path / "work"), "--server-args", json.dumps(args), "--out", str(out)],
                   cwd=ROOT, check=True, timeout=3600)
    results = {r["name"]: r for r in json.loads(out.read_text())}
    assert {name: r["status"] for name, r in results.items()} == dict.fromkeys(results, "passed"), results
    assert results["server"]["evidence"]["seconds_to_ready"] > 0
    generation = results["first-generation"]["evidence"]
    assert generation["reference"]["verdict"].startswith("all 16 tokens equal")
    assert generation["shutdown"]["clean"]
