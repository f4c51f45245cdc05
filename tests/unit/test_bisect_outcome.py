"""A step's results record read back as the search's outcome (PASS, FAIL at a stage with its class and decisive
lines, ERROR), through a saved results.json as a step writes it; the step's own tags and what its line says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from buildscripts import results
from buildscripts.bisect.outcome import outcome_of
from buildscripts.bisect.report import stages_upto
from buildscripts.bisect.search import Target, Verdict
from buildscripts.bisect_step import aside_of, layers_line
from buildscripts.matrix import load
from buildscripts.results import BuildResult, RunResults, StageResult, Status, cell_record
from buildscripts.results.decisive import EVIDENCE_KEY

ROOT = Path(__file__).resolve().parents[2]
CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
UPTO_IMPORT = stages_upto("import")


def _saved(tmp_path: Path, build: BuildResult, *stages: StageResult) -> results.CellResult:
    """The record as a step leaves it on disk, read back with the results room's loader."""
    run = RunResults(run_id="step-1", started=results.now())
    run.cells.append(cell_record(CELL, build=build, stages=stages))
    results.save(run, tmp_path / "results.json")
    found = results.load(tmp_path / "results.json").cell(CELL)
    assert found is not None
    return found


def test_every_stage_up_to_the_one_bisected_passed_is_a_pass(tmp_path: Path) -> None:
    record = _saved(tmp_path, BuildResult(status=Status.PASSED),
                    *(StageResult(name=s, status=Status.PASSED) for s in UPTO_IMPORT))
    outcome = outcome_of(record, UPTO_IMPORT)
    assert outcome.verdict is Verdict.PASS and outcome.stage == "import"


def test_a_failed_stage_is_a_failure_there_with_its_class_and_decisive_lines(tmp_path: Path) -> None:
    failed = StageResult(name="import", status=Status.FAILED, failure_class="abi-mismatch",
                         reason="torchao._C: undefined symbol",
                         evidence={EVIDENCE_KEY: "ImportError: torchao/_C.so: undefined symbol: _ZN3c10"},
                         log_excerpt="Traceback (most recent call last):\nImportError: undefined symbol: _ZN3c10")
    record = _saved(tmp_path, BuildResult(status=Status.PASSED), StageResult(name="facts", status=Status.PASSED),
                    failed)
    outcome = outcome_of(record, UPTO_IMPORT)
    assert (outcome.verdict, outcome.stage, outcome.failure_class) == (Verdict.FAIL, "import", "abi-mismatch")
    assert outcome.lines[0] == "ImportError: torchao/_C.so: undefined symbol: _ZN3c10"
    assert "torchao._C: undefined symbol" in outcome.lines
    assert Target("import", "abi-mismatch").judge(outcome).verdict is Verdict.FAIL
    assert Target("import", "missing-module").judge(outcome).verdict is Verdict.OTHER   # another class
    assert Target("arch-audit").judge(outcome).verdict is Verdict.OTHER                 # another stage


def test_a_build_that_failed_is_a_failure_at_build(tmp_path: Path) -> None:
    record = _saved(tmp_path, BuildResult(status=Status.FAILED, reason="buildx exited 1: no matching distribution"))
    outcome = outcome_of(record, UPTO_IMPORT)
    assert (outcome.verdict, outcome.stage) == (Verdict.FAIL, "build")
    assert outcome.lines == ("buildx exited 1: no matching distribution",)
    assert Target("import").judge(outcome).verdict is Verdict.OTHER
    assert outcome_of(record, stages_upto("build")).verdict is Verdict.FAIL


@pytest.mark.parametrize(("status", "why"), [(Status.SKIPPED, "needs a GPU"), (Status.ABORTED, "facts failed")])
def test_a_stage_that_could_not_run_is_an_error_never_a_pass(tmp_path: Path, status: Status, why: str) -> None:
    record = _saved(tmp_path, BuildResult(status=Status.PASSED), StageResult(name="facts", status=Status.PASSED),
                    StageResult(name="import", status=status, reason=why))
    outcome = outcome_of(record, UPTO_IMPORT)
    assert (outcome.verdict, outcome.stage) == (Verdict.ERROR, "import") and why in outcome.why


def test_a_stage_missing_from_the_record_or_a_cell_not_built_is_an_error(tmp_path: Path) -> None:
    short = _saved(tmp_path, BuildResult(status=Status.PASSED), StageResult(name="facts", status=Status.PASSED))
    assert outcome_of(short, UPTO_IMPORT).verdict is Verdict.ERROR
    unbuilt = cell_record(CELL)   # neither excluded nor built: recorded as a skipped build
    assert outcome_of(unbuilt, UPTO_IMPORT).verdict is Verdict.ERROR


def test_the_step_line_says_which_layers_were_cache_hits() -> None:
    record = cell_record(CELL, build=BuildResult(status=Status.PASSED, layers={"torch": 0.0, "sglang": 312.4}))
    assert layers_line(record) == "layers: torch cache hit, sglang built 312.4 s"


class _Images:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def remove(self, ref: str, **_: Any) -> None:
        self.removed.append(ref)


class _Client:
    def __init__(self) -> None:
        self.images = _Images()


def test_untag_removes_only_the_steps_own_tags() -> None:
    client = _Client()
    matrix = load(ROOT / "matrix.yaml")
    aside_of(matrix).untag(client, ["sglang-images-bisect:cell-abc", "sglang-images:cell-abc",  # type: ignore[arg-type]
                                    "sglang-images:sglang0.5.16-torch2.11.0-cu130-pip", "other-bisect:x",
                                    "sglang-images-bisectx:y"])
    assert client.images.removed == ["sglang-images-bisect:cell-abc"]


def test_a_step_makes_room_as_the_build_does_before_its_disk_check(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The layers of earlier steps, held by no image once their tags are gone, go before a step on a disk short of
    room (without it a real bisection was refused at its third step); then the step's disk check."""
    from types import SimpleNamespace
    from typing import cast

    from buildscripts import engine, pipeline
    from buildscripts.bisect.sources import Side
    from buildscripts.bisect_step import StepBuild
    from buildscripts.build import footprint
    from buildscripts.matrix import Cell, Matrix
    from buildscripts.workspace import Workspace

    class Refused(Exception):
        pass

    calls: list[tuple[Any, ...]] = []

    def check_disk(found: engine.Engine, cells: int) -> None:
        calls.append(("disk check", cells))
        raise Refused

    monkeypatch.setattr(engine, "connect", object)
    monkeypatch.setattr(engine, "check", lambda client: engine.Engine("20.10", str(tmp_path), (), ""))
    monkeypatch.setattr(pipeline, "prepare",
                        lambda *args: SimpleNamespace(builder=SimpleNamespace(name="default", driver="docker")))
    monkeypatch.setattr(footprint, "make_room", lambda *args: calls.append(("make room", *args)))
    monkeypatch.setattr(engine, "check_disk", check_disk)
    step = StepBuild(ws=Workspace.at(tmp_path), env={}, matrix=cast(Matrix, None),
                     cell=cast(Cell, SimpleNamespace(id=CELL)), good=cast(Side, None), bad=cast(Side, None),
                     changes=(), stages=UPTO_IMPORT)
    with pytest.raises(Refused):
        step.build("step-1", tmp_path / "runs" / f"bisect-{CELL}" / "step-1" / "lockfiles")
    assert calls == [("make room", str(tmp_path), 0, "default", "docker"), ("disk check", 1)]
