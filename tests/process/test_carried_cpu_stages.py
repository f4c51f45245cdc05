"""A verification on a GPU runner with the build runner's CPU record carried, end to end on a CPU machine: the
build runner's record sealed with a real key (as `build --stage` seals it), the record chosen and the plan cut to
the GPU stages (verify/carry.py), the real probe running only those against the CPU stand-in of a GPU
(tests/cpu_stand_in: torch that reports an H200, a server with SGLang's API) and judged by the host, the record
sealed by the GPU runner's key, each stage saying where it ran, and the gate letting it through with the verdict the
same stages run in one place get. The stand-in has no kernels, so kernel-smoke and nccl-allreduce are not asked
for: the GPU stages it can pass are gpu-visible, server and first-generation (an arch is verified only with
kernel-smoke too, so the verdict is cpu-checked either way; tests/unit/test_carry.py judges a whole ladder)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from pathlib import Path

import pytest

from buildscripts import gate, results
from buildscripts.results import CPU_STAGES, Status
from buildscripts.verify import carry, host_model
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.host import HostRunner
from buildscripts.verify.plan import Plan
from buildscripts.verify.runner import Options, verify
from tests import needs
from tests.unit.test_carry import BUILD_KEY, GPU_KEY, LOADED, PLAN, chosen, gpu_record, sealed_gpu_record, staged

STAND_IN = Path(__file__).resolve().parents[1] / "cpu_stand_in"
STAND_IN_STAGES = ("gpu-visible", "server", "first-generation")
H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)


@functools.cache
def model() -> host_model.TinyModel:
    return host_model.make(seed=92)   # a seed whose first draw has clear margins (test_host_mode_server.py)


def test_a_gpu_runner_runs_only_the_gpu_stages_and_the_record_says_where_each_ran(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import tokenizers  # noqa: F401 - the probe makes the tiny model's tokenizer with it, as in an image
    except ImportError:
        needs.unavailable("the tokenizers package", "pip install -e '.[test]'")
    found = chosen(staged(tmp_path))
    assert isinstance(found, carry.Carried), found
    made = model()
    monkeypatch.setattr(host_model, "make", lambda model="llama": made)
    env = {"PYTHONPATH": str(STAND_IN), "PATH": f"{STAND_IN / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "SGLANG_TEST_OUTPUT_IDS": json.dumps(list(made.reference.output_ids))}
    left = carry.without(datac_plan(), found)
    ran = verify(HostRunner(sys.executable, env, tmp_path / "work"),
                 Options(plan=left, log_file=tmp_path / "probe.log", handed=Handed((H200,))))
    assert left.stages == STAND_IN_STAGES and [s.name for s in ran] == list(left.stages)
    assert not {s.name for s in ran} & set(CPU_STAGES)
    said = [json.loads(line.split(" ", 1)[1])["name"] for line in (tmp_path / "probe.log").read_text().splitlines()
            if line.startswith("@@probe-result ")]
    assert said == list(left.stages)   # the probe was asked for the GPU stages alone, and ran no other
    record = sealed_gpu_record(tmp_path, gpu_record(ran, found))
    failed = [(s.name, s.status.value, s.reason) for s in record.stages if s.status is not Status.PASSED]
    assert not failed, failed
    local = gpu_record([*found.stages, *ran], None)   # the same entries, as if every one had run here
    assert (record.verdict, record.verdict_reason) == (local.verdict, local.verdict_reason)
    assert record.verdict is results.Verdict.CPU_CHECKED
    where = {s.name: (s.where, s.sealed_by, bool(s.carried_from)) for s in record.stages}
    assert {where[n] for n in CPU_STAGES} == {("container (cpu)", BUILD_KEY.public.keyid, True)}
    assert {where[n] for n in left.stages} == {("host: NVIDIA H200 (sm_90)", GPU_KEY.public.keyid, False)}
    checked = gate.check(record, 0, LOADED, [GPU_KEY.public, BUILD_KEY.public])
    assert isinstance(checked, gate.Trusted), checked
    assert isinstance(gate.check(record, 0, LOADED, [GPU_KEY.public]), gate.Refused)


def datac_plan() -> Plan:
    """The CPU stages and the GPU stages the stand-in can pass, with a stage timeout a loaded machine still meets
    (the stand-in answers at once)."""
    return dataclasses.replace(PLAN, stages=(*CPU_STAGES, *STAND_IN_STAGES), stage_timeout=300.0)
