"""The GPU stages for real, in host mode, against the SGLang installed in this Python, judged by the host.

Needs an NVIDIA GPU and SGLang; skipped with the reason otherwise. What `verify --host` runs on an H200
test machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from buildscripts.matrix import load
from buildscripts.matrix.schema import Profile
from buildscripts.results import GPU_STAGES, Status
from buildscripts.verify import gpus
from buildscripts.verify.host import HostRunner
from buildscripts.verify.plan import Plan
from buildscripts.verify.runner import Options, verify
from tests.results_factory import PROJECT_MATRIX

# CI may skip these: the GPU tier runs where a GPU and SGLang are (the lent GPU machine in host mode); CI's CPU
# runners have neither by design, and the tier's runs are recorded in evidence/. Not a missing tool of CI's.
pytestmark = [
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU (nvidia-smi not found)"),
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="SGLang is not installed here"),
]


def test_gpu_ladder_verifies_this_environment(tmp_path: Path) -> None:
    """The probe starts the server; the host (this process) polls it, asks the first generation and checks
    the tokens against its own reference decode of fresh weights, with the server's network cut."""
    args = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--disable-cuda-graph"]
    plan = Plan.make(archs=["sm_90a", "sm_100a", "sm_120a"], lane_cuda=None, stages=list(GPU_STAGES),
                     stage_timeout=900, profile=Profile(args=args))
    handed = gpus.on_host(gpus.discover(None), os.environ)
    stages = {s.name: s for s in verify(HostRunner(sys.executable, {}, tmp_path / "work"),
                                        Options(plan=plan, log_file=tmp_path / "probe.log", handed=handed))}
    assert {name: s.status for name, s in stages.items()} == dict.fromkeys(stages, Status.PASSED), stages
    assert {s.gpu for s in stages.values()} <= {g.name for g in handed.gpus}
    server = stages["server"].evidence
    assert server["observed_by"] == "host" and server["seconds_to_ready"] > 0
    assert server["network"]["cut"] or "warning" in server
    generation = stages["first-generation"].evidence
    assert generation["reference"]["verdict"] == "all 16 tokens equal"
    assert generation["shutdown"]["clean"]


def test_the_tp_profile_spans_this_machines_gpus(tmp_path: Path) -> None:
    """nccl-allreduce across every GPU here, exact on every rank; the tp server on two or more, and with one
    GPU the server (and first-generation) skipped with the reason, never passed."""
    profile = load(PROJECT_MATRIX).spec.profiles["tp"]
    plan = Plan.make(archs=["sm_90a", "sm_100a", "sm_120a"], lane_cuda=None, stages=list(GPU_STAGES),
                     stage_timeout=1500, profile=profile, profile_name="tp")
    handed = gpus.on_host(gpus.discover(None), os.environ)
    stages = {s.name: s for s in verify(HostRunner(sys.executable, {}, tmp_path / "work"),
                                        Options(plan=plan, log_file=tmp_path / "probe.log", handed=handed))}
    allreduce = stages["nccl-allreduce"]
    assert allreduce.status is Status.PASSED, allreduce
    assert allreduce.evidence["world_size"] == len(handed.gpus) and allreduce.evidence["backend"] == "nccl"
    if len(handed.gpus) < 2:
        assert stages["server"].status is Status.SKIPPED and "at least 2" in (stages["server"].reason or "")
        assert stages["first-generation"].status is Status.SKIPPED
    else:
        assert f"--tp-size {len(handed.gpus)}" in " ".join(stages["server"].evidence["argv"])
        assert stages["first-generation"].evidence["reference"]["verdict"] == "all 16 tokens equal"
