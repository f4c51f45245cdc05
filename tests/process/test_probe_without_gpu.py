"""The real probe, run as a process on a machine without a GPU: every GPU stage is SKIPPED with the
reason, nothing passes, and the host's reason (PROBE_NO_GPU_REASON) reaches the result."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_STAGES = "gpu-visible,kernel-smoke,server,first-generation"

# CI may skip this: it is about a machine without a GPU, and on a GPU runner the GPU stages run for real instead
# (tests/gpu); CI's CPU runners run it. Not a missing tool, so not tests/needs.py's rule.
pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")


def probe(tmp_path: Path, env: dict[str, str]) -> list[dict[str, object]]:
    out = tmp_path / "probe.json"
    done = subprocess.run([sys.executable, "-m", "buildscripts.probe", "--mode", "host", "--archs", "sm_90a",
                           "--stages", GPU_STAGES, "--workdir", str(tmp_path / "work"), "--out", str(out)],
                          cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("@@probe-result ") == 4
    results: list[dict[str, object]] = json.loads(out.read_text())
    return results


def test_gpu_stages_skip_with_the_reason(tmp_path: Path) -> None:
    results = probe(tmp_path, {})
    assert [r["status"] for r in results] == ["skipped"] * 4
    assert str(results[0]["reason"]).startswith("no GPU visible")
    assert all(str(r["reason"]).startswith("needs a GPU: no GPU visible") for r in results[1:])
    assert not (tmp_path / "work").exists()  # no model was made, no server started


def test_the_hosts_reason_is_passed_through(tmp_path: Path) -> None:
    results = probe(tmp_path, {"PROBE_NO_GPU_REASON": "the Docker engine has no nvidia runtime"})
    assert results[0]["reason"] == "no GPU visible: the Docker engine has no nvidia runtime"
