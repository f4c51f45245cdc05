"""The arguments the commands share (buildscripts/arguments.py) mean one thing everywhere: `--results` is
what a command reads and a pattern matching nothing is refused by each; `--only` selects cells and
records by one rule; `--stages` is checked one way by `build` and `verify`; the stage timeout is one rule."""

from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path

import pytest

from buildscripts import arguments, engine, matrix, results
from buildscripts.commands import build as build_command
from buildscripts.commands import export as export_command
from buildscripts.commands import promote as promote_command
from buildscripts.commands import report as report_command
from buildscripts.commands import tag as tag_command
from buildscripts.commands import verify as verify_command
from buildscripts.errors import ConfigError, ResultsError, SelectionError
from buildscripts.matrix.schema import Profile
from buildscripts.publish import recorded
from buildscripts.trust.keys import KEY_DIR_ENV
from buildscripts.verify import provision
from buildscripts.verify.asked import Asked
from buildscripts.verify.plan import MIN_STAGE_TIMEOUT, stage_timeout
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import make_cell, make_run, sealed

ROOT = Path(__file__).resolve().parents[2]
READERS = {"report": ["--no-readme"], "tag": [], "promote": ["--registry", "127.0.0.1:5000"], "export": ["x"]}
COMMANDS = {"report": report_command, "tag": tag_command, "promote": promote_command, "export": export_command}


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")

    def refuse() -> None:
        pytest.fail("the engine was contacted before the results were found")
    monkeypatch.setattr(engine, "connect", refuse)
    return Workspace.at(tmp_path)


@pytest.mark.parametrize("command", sorted(READERS))
def test_every_command_that_reads_results_refuses_a_pattern_that_matches_nothing(command: str,
                                                                                  ws: Workspace) -> None:
    argv = [*READERS[command], "--results", str(ws.root / "runs" / "typo*" / "results.json")]
    with pytest.raises(ResultsError, match="no results file matches") as exc:
        call(COMMANDS[command], argv, ws, {})
    assert "typo*" in exc.value.message


def test_results_files_are_globbed_at_any_depth_once_each(tmp_path: Path) -> None:
    for folder in ("a", "b/c"):
        results.save(make_run(), tmp_path / folder / "results.json")
    pattern = str(tmp_path / "**" / "results.json")
    assert arguments.results_files([pattern, pattern]) == [tmp_path / "a" / "results.json",
                                                           tmp_path / "b" / "c" / "results.json"]
    assert arguments.results_files([]) == []   # nothing asked: the command's default applies


def test_tag_takes_several_results_files_and_checks_every_one_before_the_engine(ws: Workspace) -> None:
    good = make_run(kinds=("verified", "incompatible"))
    good.matrix_digest = results.matrix_digest(matrix.load(ws.matrix).spec)
    good.cells = [sealed(cell, matrix_digest=good.matrix_digest) for cell in good.cells]
    results.save(good, ws.runs / "a" / "results.json")
    results.save(make_run(), ws.runs / "b" / "results.json")   # no matrix digest: refused
    with pytest.raises(ResultsError, match=r"b/results\.json"):
        call(tag_command, ["--results", str(ws.runs / "*" / "results.json")], ws,
             {KEY_DIR_ENV: os.environ[KEY_DIR_ENV]})


def test_tag_refuses_files_whose_records_of_one_cell_earned_tags_for_different_images(ws: Workspace) -> None:
    digest = results.matrix_digest(matrix.load(ws.matrix).spec)
    for name, image in (("aa-new", "sha256:" + "ab" * 32), ("zz-old", "sha256:" + "cd" * 32)):
        run = make_run(run_id=name, kinds=("verified",))
        run.matrix_digest = digest
        run.cells = [sealed(make_cell("verified", image_id=image), matrix_digest=digest)]
        results.save(run, ws.runs / name / "results.json")
    with pytest.raises(ResultsError, match="earned good tags for 2 different images") as exc:
        call(tag_command, ["--results", str(ws.runs / "*" / "results.json")], ws,
             {KEY_DIR_ENV: os.environ[KEY_DIR_ENV]})
    assert "aa-new" in exc.value.message and "zz-old" in exc.value.message


def test_tag_without_results_is_a_usage_error(ws: Workspace) -> None:
    with pytest.raises(SystemExit) as exc:
        call(tag_command, [], ws, {})
    assert exc.value.code == 2


def test_only_selects_matrix_cells_and_recorded_cells_by_the_same_rule() -> None:
    cells = matrix.load(ROOT / "matrix.yaml").cells
    run = make_run(kinds=("verified", "incompatible"))
    for only, skip in ((["*-pip-*"], []), (["sglang0.5.16-*"], ["*-none-*"]), ([], ["*-apt-*"])):
        try:
            chosen = {c.id for c in matrix.select(cells, only, skip, include_excluded=True)}
        except SelectionError:
            chosen = set()
        # an opt-in platform's cells only where a pattern names them (matrix/cells.py)
        assert chosen == {c.id for c in cells if matrix.selected(c.id, only, skip)
                          and (c.opt_in is None or any(fnmatch.fnmatchcase(c.id, p) for p in only))}
    assert recorded.positions(run, ["nothing-*"]) == []
    assert recorded.positions(run, []) == [0, 1]


@pytest.mark.parametrize(("value", "needle"), [("import,nope", "unknown stage(s): nope"),
                                               ("", "--stages '' names an empty stage"),
                                               ("import,", "names an empty stage")])
def test_build_and_verify_check_stages_alike(value: str, needle: str, ws: Workspace) -> None:
    with pytest.raises(ConfigError) as from_build:
        build_command.parse(["--stages", value], ws, {})
    with pytest.raises(ConfigError) as from_verify:
        verify_command.parse(["some-image", "--stages", value], ws, {})
    assert needle in from_build.value.message and from_build.value.message == from_verify.value.message


def test_the_stage_timeout_rule_is_one_for_the_build_and_verify() -> None:
    slow = Profile(timeout_s=1800)
    assert stage_timeout(Profile()) == MIN_STAGE_TIMEOUT == 900
    assert stage_timeout(slow) == 1800                      # a slow server's deadline is not cut short
    assert stage_timeout(slow, 60) == 60                    # --stage-timeout wins
    loaded = matrix.load(ROOT / "matrix.yaml")
    asked = Asked(ws=Workspace.at(ROOT), matrix=loaded)
    assert provision.plan(asked, slow, cell=loaded.buildable()[0]).stage_timeout == stage_timeout(slow)


def test_build_and_verify_refuse_a_negative_gpu_alike(ws: Workspace) -> None:
    with pytest.raises(ConfigError, match="--gpu -1 is not a GPU index"):
        build_command.parse(["--gpu", "-1"], ws, {})
    with pytest.raises(ConfigError, match="--gpu -1 is not a GPU index"):
        verify_command.parse(["some-image", "--gpu", "-1"], ws, {})


def test_an_unknown_profile_is_said_alike_by_build_and_verify(ws: Workspace) -> None:
    with pytest.raises(ConfigError) as from_build:
        build_command.parse(["--profile", "nope"], ws, {})
    with pytest.raises(ConfigError) as from_verify:
        call(verify_command, ["some-image", "--profile", "nope", "--out", str(ws.root / "r.json")], ws, {})
    assert "no server profile 'nope'" in from_build.value.message
    assert from_build.value.message == from_verify.value.message
