"""A forged interpreter (tests/forged.py: prints every stage as passed on a B200) through `verify --host
--python X` and through the LXC runner (its real probe script, run by a shell of this machine standing in
for `lxc-attach`): no GPU stage passes, with no GPU on the machine and with one the host has (an H200)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildscripts.commands import verify as verify_command
from buildscripts.errors import RunFailed
from buildscripts.lxc.target import Target
from buildscripts.results import StageResult, Status
from buildscripts.trust.keys import KEY_DIR_ENV
from buildscripts.verify import gpus, host, lxcrunner
from buildscripts.verify.gpus import Gpu, Handed
from buildscripts.verify.host import HostRunner
from buildscripts.verify.plan import Plan
from buildscripts.verify.runner import Options, Runner, verify
from buildscripts.workspace import Workspace
from tests import forged
from tests.commands import call

H200 = Gpu(0, "NVIDIA H200", "GPU-9f2a0c1e-0000-4000-8000-00000000c0de", "9.0", "580.159.04", 143771)
PLAN = Plan.make(archs=["sm_90a", "sm_100a"], lane_cuda="13.0", stage_timeout=30)


@dataclass(frozen=True)
class HereTarget(Target):
    """An "LXC container" that is this machine: the runner's own login script runs in a local shell."""

    def exec_argv(self, command: Sequence[str], *, clear_env: bool = True) -> list[str]:
        return list(command)


def gpu_stages(stages: list[StageResult]) -> dict[str, StageResult]:
    return {s.name: s for s in stages if s.name in forged.GPU_STAGES}


@pytest.mark.parametrize("serve", ["0", "1"])
def test_verify_host_with_a_forged_python_passes_no_gpu_stage(open_tmp: Path, serve: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "discover", lambda info: gpus.Discovery(problem="no GPU here"))
    out = open_tmp / "results.json"
    with pytest.raises(RunFailed):
        call(verify_command, ["--host", "--python", str(forged.write(open_tmp)), "--out", str(out), "--stage-timeout",
                              "30"], Workspace.at(runs=open_tmp / "runs"),
             {"SGLANG_TEST_SERVE": serve, KEY_DIR_ENV: os.environ[KEY_DIR_ENV]})   # the session's key, not the user's
    cell = json.loads(out.read_text())["cells"][0]
    found = {s["name"]: s for s in cell["stages"]}
    assert [n for n in forged.GPU_STAGES if found[n]["status"] == "passed"] == []
    assert found["gpu-visible"]["failure_class"] == "gpu-claim-unbacked"
    assert "no GPU here" in found["gpu-visible"]["reason"]
    assert cell["verdict"] == "failed" and cell["verified_archs"] == []


def runners(tmp_path: Path) -> dict[str, Runner]:
    python = str(forged.write(tmp_path))
    return {"host": HostRunner(python, {}, tmp_path / "work"),
            "lxc": lxcrunner.LxcRunner(HereTarget("lxc", "here"), python)}


@pytest.mark.parametrize("mode", ["host", "lxc"])
@pytest.mark.parametrize("serve", ["0", "1"])
def test_a_forged_b200_on_a_host_with_an_h200_gets_nothing(tmp_path: Path, mode: str, serve: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lxcrunner, "running", lambda target: (True, "RUNNING"))
    monkeypatch.setattr(host, "FIND_S", 0.3)   # the pid it names is never this verification's: no need to wait 5 s
    monkeypatch.setenv("SGLANG_TEST_SERVE", serve)
    stages = verify(runners(tmp_path)[mode], Options(plan=PLAN, log_file=tmp_path / "probe.log",
                                                     handed=Handed((H200,))))
    found = gpu_stages(stages)
    assert [s.name for s in found.values() if s.status is Status.PASSED] == []
    visible = found["gpu-visible"]
    assert visible.failure_class == "gpu-claim-unbacked" and "did not hand over" in (visible.reason or "")
    assert found["server"].failure_class == "server-unobserved"
    if serve == "1":   # it named a server the host looked for: no process of this verification has that pid
        assert "cannot reach the server" in (found["server"].reason or "")
    assert {s.arch for s in found.values()} <= {None, "sm_90"}   # never the claimed sm_100
    assert all(s.where.startswith(mode) for s in stages)


def test_a_forged_h200_claim_without_a_uuid_on_the_host_gpu_passes_as_the_hosts(tmp_path: Path) -> None:
    """The contrast: the same stages claimed on the GPU the host has are given the host's facts (and only
    the server stages, which need the host's own observation, still fail)."""
    script = forged.SCRIPT.replace(b"NVIDIA B200", b"NVIDIA H200").replace(b'"sm_100"', b'"sm_90"')
    script = script.replace(b'"uuid": "GPU-00000000-1111-2222-3333-444444444444", ', b"")
    python = tmp_path / "python3"
    python.write_bytes(script)
    python.chmod(0o755)
    stages = verify(HostRunner(str(python), {}, tmp_path / "work"),
                    Options(plan=PLAN, log_file=tmp_path / "probe.log", handed=Handed((H200,))))
    found = gpu_stages(stages)
    assert found["gpu-visible"].status is Status.PASSED and found["gpu-visible"].where == "host: NVIDIA H200 (sm_90)"
    assert found["kernel-smoke"].arch == "sm_90"
    assert found["server"].failure_class == "server-unobserved"
