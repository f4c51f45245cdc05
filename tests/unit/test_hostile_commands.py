"""Hostile input to `lock --check`, `report` and `verify`, and names that become paths: each gets a clear
error (one of the project's FatalErrors), never a traceback; verify says so before contacting the engine."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from buildscripts import engine, proc, results
from buildscripts.cli import Command
from buildscripts.commands import lock as lock_command
from buildscripts.commands import report as report_command
from buildscripts.commands import verify as verify_command
from buildscripts.errors import ConfigError, FatalError, LockError, ResultsError, ToolMissingError
from buildscripts.report import markdown
from buildscripts.workspace import Workspace, checked_name
from tests.commands import call
from tests.results_factory import make_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A copy of the project's matrix and locks: what `lock --check` passes on, ready to be damaged."""
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copytree(ROOT / "lockfiles", tmp_path / "lockfiles")
    return Workspace.at(tmp_path)


def index_of(ws: Workspace) -> dict[str, object]:
    data: dict[str, object] = json.loads((ws.locks / "index.json").read_text())
    return data


def check(ws: Workspace) -> str:
    with pytest.raises(LockError) as exc:
        call(lock_command, ["--check"], ws, {})
    return exc.value.message


# ---------------------------------------------------------------- lock --check


def test_the_copied_locks_pass(ws: Workspace) -> None:
    assert call(lock_command, ["--check"], ws, {}) == 0


def test_a_binary_lockfile_is_a_stale_lock(ws: Workspace) -> None:
    (ws.locks / "lanes" / "torch2.9.1-cu128-bookworm.txt").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    assert "lanes/torch2.9.1-cu128-bookworm.txt is not a lockfile written by `nox -s lock` (it is not UTF-8" \
        in check(ws)


@pytest.mark.parametrize(("text", "needle"), [
    (b"\xff\xfe{}", "is not UTF-8"),
    (b"[]", "another format"),
    (b"{\"format\": 1, \"cells\": []}", "`cells` is not a mapping"),
    (b"{\"format\": 1, \"cells\": {\"x\": 3}}", "cells.x is not a mapping"),
    (b"{\"format\": 1, \"cells\": {\"x\": {\"state\": \"great\"}}}", "cells.x.state is 'great'"),
    (b"{\"format\": 1, \"cells\": {\"x\": {\"state\": \"ok\"}}}", "cells.x.inputs-sha256 is missing"),
    (b"{\"format\": 1, \"cells\": " + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than 64 levels"),
    (b"{\"format\": 1, \"cells\": " + b"[" * 70 + b"]" * 70 + b"}", "nested deeper than 64 levels"),
    (b"{\"format\": 1,", "is not valid JSON"),
])
def test_a_malformed_index_is_a_lock_error(ws: Workspace, text: bytes, needle: str) -> None:
    (ws.locks / "index.json").write_bytes(text)
    assert needle in check(ws)


def test_an_index_that_is_a_folder_is_a_lock_error(ws: Workspace) -> None:
    (ws.locks / "index.json").unlink()
    (ws.locks / "index.json").mkdir()
    assert "is not a regular file" in check(ws)


def test_a_state_edited_by_hand_fails_the_check(ws: Workspace) -> None:
    """A cell recorded as incompatible is skipped by builds: flipping the state by hand must not pass."""
    data = index_of(ws)
    cells = data["cells"]
    assert isinstance(cells, dict)
    cells["sglang0.5.16-torch2.11.0-cu130-pip-bookworm"].update(state="incompatible", reason="hand-made")
    (ws.locks / "index.json").write_text(json.dumps(data))
    assert "recorded as incompatible in lockfiles/index.json, but its locks are all present" in check(ws)


def test_recorded_versions_edited_by_hand_fail_the_check(ws: Workspace) -> None:
    data = index_of(ws)
    cells = data["cells"]
    assert isinstance(cells, dict)
    cells["sglang0.5.16-torch2.11.0-cu130-none-bookworm"]["versions"]["torch"] = "9.9.9"
    (ws.locks / "index.json").write_text(json.dumps(data))
    assert "versions recorded in lockfiles/index.json are not those of its locks" in check(ws)


# ---------------------------------------------------------------- report


def report_error(tmp_path: Path, *argv: str) -> FatalError:
    with pytest.raises(FatalError) as exc:
        call(report_command, ["--no-readme", *argv], Workspace.at(tmp_path), {})
    return exc.value


@pytest.mark.parametrize(("data", "needle"), [
    (b"{\"run_id\": \"caf\xe9\"}", "results.json:1: byte 0xe9 is not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
    (b"{\"a\": " * 70 + b"1" + b"}" * 70, "nested deeper than 64 levels"),
])
def test_unreadable_results_are_results_errors(tmp_path: Path, data: bytes, needle: str) -> None:
    path = tmp_path / "runs" / "x" / "results.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    error = report_error(tmp_path)
    assert isinstance(error, ResultsError) and needle in error.message


def test_out_naming_a_file_is_a_config_error_before_reading(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a folder")
    error = report_error(tmp_path, "--out", str(tmp_path / "out"))
    assert isinstance(error, ConfigError) and "is a file, not a folder" in error.message
    error = report_error(tmp_path, "--out", str(tmp_path / "out" / "below"))
    assert isinstance(error, ConfigError) and "out is a file, not a folder" in error.message  # before reading


def test_out_below_a_file_is_a_config_error(tmp_path: Path) -> None:
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), tmp_path / "runs" / "a" / "results.json")
    (tmp_path / "out").write_text("not a folder")
    error = report_error(tmp_path, "--out", str(tmp_path / "out" / "below"))
    assert isinstance(error, ConfigError) and "out is a file, not a folder" in error.message


def test_a_readme_that_is_no_utf8_or_a_folder_is_a_config_error(tmp_path: Path) -> None:
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), tmp_path / "runs" / "a" / "results.json")
    (tmp_path / "README.md").write_bytes(f"{markdown.START}\n\xe9\n{markdown.END}\n".encode("latin-1"))
    runs = str(tmp_path / "runs" / "*" / "results.json")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        call(report_command, ["--update-readme", "--results", runs], Workspace.at(tmp_path), {})
    with pytest.raises(ConfigError, match="is not a regular file"):
        call(report_command, ["--readme", str(tmp_path)], Workspace.at(tmp_path), {})


# ---------------------------------------------------------------- verify: arguments before the engine


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        pytest.fail("verify contacted the Docker engine before checking its arguments")
    monkeypatch.setattr(engine, "connect", refuse)


@pytest.mark.parametrize(("argv", "needle"), [
    (["--stages", "import,nope"], "unknown stage(s): nope"),
    (["--stages", ""], "--stages '' names an empty stage"),         # was "unknown stage(s): " and nothing
    (["--stages", "import,"], "names an empty stage"),
    (["--stage-timeout", "0"], "--stage-timeout 0.0 is not a number of seconds"),
    (["--stage-timeout", "1e300"], "is not a number of seconds up to a day"),
    (["--stage-timeout", "-5"], "is not a number of seconds"),
    (["--stage-timeout", "nan"], "is not a number of seconds"),
    (["--stage-timeout", "inf"], "is not a number of seconds"),
    (["--gpu", "-1"], "--gpu -1 is not a GPU index"),
    (["--archs", "sm_999"], "'sm_999' is not a known GPU target"),
    (["--archs", "sm_90a,"], "'' is not a GPU target"),
    (["--archs", "sm_٩٠a"], "is not a GPU target"),
    (["--lane-cuda", "13"], "is not a CUDA major.minor"),
    (["--run-id", "../../x"], "--run-id '../../x' cannot be a folder name"),
    (["--cell-id", "a/b"], "--cell-id 'a/b' cannot be a folder name"),
    (["--cell-id", ".."], "cannot be a folder name"),
])
def test_verify_arguments_are_checked_before_the_engine(argv: list[str], needle: str, tmp_path: Path,
                                                         no_engine: None) -> None:
    del no_engine
    with pytest.raises(ConfigError) as exc:  # the workspace has no matrix.yaml: not read either
        call(verify_command, ["some-image", *argv], Workspace.at(tmp_path), {})
    assert needle in exc.value.message


def test_verify_reads_the_matrix_before_the_engine(tmp_path: Path, no_engine: None) -> None:
    del no_engine
    with pytest.raises(ConfigError, match="cannot read the matrix file"):
        call(verify_command, ["some-image"], Workspace.at(tmp_path), {})


# ---------------------------------------------------------------- names that become paths


@pytest.mark.parametrize("name", ["..", ".", "../x", "a/b", "/etc", "", ".hidden", "-rf", "a b", "a\x00b",
                                  "a\nb", "\x1b[31m", "[/]", "ｘ", "a" * 201, "a\\b"])
def test_unsafe_names_are_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be a folder name"):
        checked_name(name, "run id")
    with pytest.raises(ConfigError):
        Workspace.at(tmp_path).run_dir(name)
    with pytest.raises(ConfigError):
        Workspace.at(tmp_path).cell_dir("run", name)


@pytest.mark.parametrize("name", ["20261130-101500-ab12cd", "sglang0.5.16-torch2.11.0-cu130-pip-bookworm",
                                  "host", "sglang0.5.16-x@pct-200", "a+b_c"])
def test_names_this_project_makes_are_safe(name: str, tmp_path: Path) -> None:
    assert Workspace.at(tmp_path).cell_dir(name, name) == tmp_path.resolve() / "runs" / name / name


# ---------------------------------------------------------------- paths no file system takes


@pytest.mark.parametrize("value", ["a\x00b", "\ud800"])
@pytest.mark.parametrize(("command", "flag"), [(lock_command, "--matrix"), (report_command, "--out"),
                                               (report_command, "--results"), (verify_command, "--out")])
def test_paths_no_file_system_takes_are_usage_errors(command: Command, flag: str, value: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        call(command, [flag, value], Workspace.at(tmp_path), {})
    assert exc.value.code == 2
    assert "cannot" in capsys.readouterr().err


def test_a_program_that_cannot_be_started_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify --host --python /etc/passwd`: Popen raises PermissionError; the log file it opened is closed."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(subprocess, "Popen", refuse)
    with pytest.raises(ToolMissingError, match="'/etc/passwd' could not be started: Permission denied"):
        proc.run(["/etc/passwd", "-c", "pass"], log=tmp_path / "x.log")
    gc.collect()  # an unclosed log file would warn here, and warnings are errors
