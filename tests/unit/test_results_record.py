"""The results record: made once and frozen, schema-1 files still read, one arch rule, one probe reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from buildscripts import results
from buildscripts.probe.serving import unrecognized_flags
from buildscripts.results import BuildResult, ExpectedFailure, Given, StageResult, Status, Verdict, cell_record
from buildscripts.verify import netns, output
from buildscripts.verify.container import network_plan
from buildscripts.verify.one_image import axes_from_labels
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]


def test_a_judged_record_is_frozen() -> None:
    cell = cell_record("c", build=BuildResult(status=Status.PASSED), stages=[])
    assert cell.verdict is Verdict.BUILT
    with pytest.raises(ValidationError, match="frozen"):
        cell.verdict = Verdict.VERIFIED  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        cell.build.status = Status.FAILED  # type: ignore[misc,union-attr]


def test_the_factory_fills_what_a_cell_needs() -> None:
    excluded = cell_record("x", Given(excluded="pins another torch"))
    assert excluded.verdict is Verdict.INCOMPATIBLE and excluded.build is None
    unbuilt = cell_record("y")
    assert unbuilt.build is not None and unbuilt.build.status is Status.SKIPPED
    seen = StageResult(name="facts", status=Status.PASSED, evidence={"versions": {"torch": "2.11.0+cu130"}})
    versions = cell_record("z", Given(versions={"torch": "2.11.0", "sglang": "0.5.16"}), stages=[seen]).versions
    assert versions == {"torch": "2.11.0+cu130", "sglang": "0.5.16"}  # what the image said wins


def test_schema_1_evidence_is_read_and_upgraded() -> None:
    cpu = results.load(ROOT / "evidence" / "cpu-2026-11-29" / "results.json")  # written as schema 1
    assert cpu.schema_version == results.SCHEMA_VERSION
    expected = {c.cell_id: c.expected for c in cpu.cells if c.expected}
    assert expected["sglang0.5.10-torch2.9.1-cu128-none-bookworm"] == ExpectedFailure(
        stages=["import", "toolchain"], failure_class="cuda-home-missing",
        reason=expected["sglang0.5.10-torch2.9.1-cu128-none-bookworm"].reason)
    assert all(c.targets == c.axes["archs"].split() for c in cpu.cells if c.axes.get("archs"))
    assert [c.verdict for c in cpu.cells] == [results.judge(c)[0] for c in cpu.cells]
    old = ExpectedFailure.model_validate({"stage": "import", "class": "", "reason": "r"})
    assert old.stages == ["import"] and old.failure_class is None


def test_one_arch_rule() -> None:
    assert results.family("sm_90a") == results.family("sm_90") == results.family("sm90") == "sm_90"
    assert results.family("sm_120f") == "sm_120" and results.tag_form("sm_100a") == "sm100"
    assert results.families(["sm_90a", "sm_100a"]) == {"sm_90", "sm_100"}


def test_one_probe_reader_names_where_a_stage_ran() -> None:
    on_gpu = {"name": "server", "status": "passed", "where": "container (gpu)", "gpu": "NVIDIA H200", "arch": "sm_90"}
    assert output.to_stage(on_gpu).where == "container: NVIDIA H200 (sm_90)"
    assert output.to_stage({"name": "facts", "status": "passed", "where": "host (cpu)"}).where == "host (cpu)"
    # the runner knows where it ran the probe: a line that says otherwise is not believed
    claimed = {"name": "facts", "status": "passed", "where": "container (cpu)"}
    assert output.to_stage(claimed, "host").where == "host (cpu)"
    malformed = output.to_stage({"name": "facts", "status": "maybe"})
    assert malformed.status is Status.FAILED and "malformed" in (malformed.reason or "")
    run = output.ProbeRun.of(["facts"])
    assert run.add_line('@@probe-result {"name": "facts", "status": "passed"}')
    assert not run.add_line("@@probe-result {truncated") and not run.add_line("plain output")
    assert len(run.results) == 1 and len(run.output) == 3


def test_axes_come_from_labels_only_when_all_are_there() -> None:
    names = ("cell", "base", "python", "torch", "cuda", "lane", "sglang", "toolkit", "archs")
    labels = {f"io.sglang-images.{n}": f"v-{n}" for n in names}
    assert axes_from_labels(labels) == {n: f"v-{n}" for n in names}
    del labels["io.sglang-images.toolkit"]
    assert axes_from_labels(labels) is None


def test_a_profile_for_another_sglang_is_recognised() -> None:
    tail = ["usage: launch_server.py [-h] ...",
            "launch_server.py: error: unrecognized arguments: --cuda-graph-backend-prefill tc_piecewise"]
    assert unrecognized_flags(tail) == "--cuda-graph-backend-prefill tc_piecewise"
    assert unrecognized_flags(["RuntimeError: CUDA error"]) is None


class _Networks:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def list(self, names: list[str]) -> list[Any]:
        return [type("Net", (), {"name": n})() for n in self.names if n in names]


def _client(networks: list[str], base_url: str = "http+docker://localhost") -> Any:
    return type("Client", (), {"networks": _Networks(networks), "api": type("Api", (), {"base_url": base_url})()})()


def test_containers_get_no_network_when_the_host_can_join_theirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "problem", lambda: None)
    assert network_plan(_client(["bridge", "host", "none"])) == ({"network_mode": "none"}, None)
    assert network_plan(_client(["host", "none"])) == ({"network_mode": "none"}, None)   # no bridge needed


def test_where_the_network_cannot_be_cut_the_engine_default_stays_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "problem", lambda: "joining a network namespace needs CAP_SYS_ADMIN (root)")
    assert network_plan(_client(["bridge", "host", "none"])) == ({}, netns.problem())
    assert network_plan(_client(["host", "none"])) == ({"network_mode": "host"}, netns.problem())
    monkeypatch.setattr(netns, "problem", lambda: None)
    options, why = network_plan(_client(["bridge"], "http://10.0.0.5:2375"))
    assert options == {} and why and "not on this machine" in why


def test_one_workspace_places_everything(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path)
    assert (ws.matrix, ws.locks, ws.runs) == (tmp_path / "matrix.yaml", tmp_path / "lockfiles", tmp_path / "runs")
    assert ws.shown(tmp_path / "lockfiles" / "x.txt") == "lockfiles/x.txt"
    assert ws.shown(Path("/elsewhere")) == "/elsewhere"
    assert Workspace.at().images == ROOT / "images"
