"""Hostile results against the reports (issue 27): text from the results never acts as markup in any format,
numbers JSON cannot hold are refused, and a report set is replaced whole or not at all."""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from buildscripts import disk, report, results
from buildscripts.commands import report as report_command
from buildscripts.errors import ConfigError, ResultsError
from buildscripts.report import console, html, junit, markdown
from buildscripts.results import RunResults, StageResult, Status
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import finish, make_cell, make_run, vouched
from tests.unit.fuzzing import disk_fills_at

SET = ("results.json", "results.schema.json", "compat.md", "compat.html", "junit.xml", "sizes.md")


def hostile_run(text: str, run_id: str = "run-1") -> RunResults:
    """A run whose cell id, stage name and reason, GPU name and finished time all carry `text`."""
    cell = make_cell("verified")
    stages = [s.model_copy(update={"gpu": f"NVIDIA {text}"}) if s.gpu else s for s in cell.stages]
    stages.append(StageResult(name=f"extra{text}", status=Status.FAILED, reason=f"why {text}",
                              log_excerpt=f"log {text}"))
    cell = finish(cell, cell_id=f"sglang{text}", stages=stages)
    return RunResults(run_id=run_id, started="2025-01-01T00:00:00+00:00", finished=f"2025 {text}", cells=[cell])


# ---------------------------------------------------------------- console: rich markup


@pytest.mark.parametrize("text", ["[/]", "[bold]x", "[link=file:///etc/passwd]x[/link]", "[[/]]", "\\[b]"])
def test_markup_in_the_results_is_shown_as_text_on_the_console(text: str) -> None:
    out = io.StringIO()
    console.summary(vouched(hostile_run(text, run_id=f"run{text}")), Console(file=out, width=400, emoji=False))
    assert f"sglang{text}" in out.getvalue() and f"run{text}" in out.getvalue()


def test_a_terminal_escape_in_the_results_is_shown_not_obeyed_on_the_console() -> None:
    out = io.StringIO()
    console.summary(vouched(hostile_run("\x1b]0;owned\x07\x1b[2J")), Console(file=out, width=400, emoji=False))
    assert "\x1b" not in out.getvalue() and "sglang" in out.getvalue()


# ---------------------------------------------------------------- Markdown and the README


def readme_after(run: RunResults, tmp_path: Path, times: int = 2) -> str:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{markdown.START}\n{markdown.END}\n\nafter\n")
    for _ in range(times):
        markdown.update_readme(readme, vouched(run))
    return readme.read_text()


def test_a_cell_id_carrying_the_markers_leaves_one_pair_in_the_readme(tmp_path: Path) -> None:
    text = f"\n{markdown.END}\n{markdown.START}\n"
    after = readme_after(hostile_run(text), tmp_path)
    assert (after.count(markdown.START), after.count(markdown.END)) == (1, 1)
    assert after.endswith("\nafter\n")


def test_a_readme_with_two_start_markers_is_refused(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"{markdown.START}\n{markdown.START}\n{markdown.END}\n")
    with pytest.raises(ConfigError, match="has 2 start and 1 end compatibility-table markers"):
        markdown.update_readme(readme, vouched(make_run()))


@pytest.mark.parametrize("text", ["`<script>alert(1)</script>`", "<img src=x onerror=alert(1)>", "a|b\nc",
                                  "[click](javascript:alert(1))", "x\r\n| --- |"])
def test_no_text_from_the_results_becomes_markdown_or_html(text: str) -> None:
    page = markdown.document(vouched(hostile_run(text)))
    assert "<script" not in page and "<img" not in page and not re.search(r"(?<!\\)\]\(javascript", page)
    tables = [[line for line in part.splitlines() if line.startswith("|")] for part in page.split("\n\n")]
    for rows in filter(None, tables):  # every table: no cell split or added, no row made a separator
        assert len({len(re.split(r"(?<!\\)\|", line)) for line in [rows[0], *rows[2:]]}) == 1, rows
        assert all(not line.startswith("| ---") for line in rows[2:])


def test_a_plain_cell_id_stays_a_code_span() -> None:
    assert "`sglang0.5.16-torch2.11.0-cu130-pip-bookworm`" in markdown.document(vouched(make_run()))


def test_the_finished_time_is_escaped() -> None:
    footer = markdown.table(vouched(hostile_run("<b>|\nx"))).splitlines()[-1]
    assert "(2025 &lt;b&gt;\\| x)" in footer


def test_a_readme_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "docs" / "README.md"
    target.parent.mkdir()
    target.write_text(f"# x\n{markdown.START}\n{markdown.END}\n")
    link = tmp_path / "README.md"
    link.symlink_to(target)
    written = markdown.update_readme(link, vouched(make_run()))
    assert written == target and link.is_symlink() and "verified" in target.read_text()


# ---------------------------------------------------------------- JUnit and HTML


@pytest.mark.parametrize("text", ["\x1b[31mred\x1b[0m", "\x00\x07\x08\x0b\x0c", "\x1b]0;title\x07", "\ufffe"])
def test_junit_is_well_formed_whatever_the_logs_hold(text: str) -> None:
    xml = junit.render(vouched(hostile_run(text)))
    root = ET.fromstring(xml)  # raises on a character XML cannot hold
    failure = next(f for f in root.iter("failure") if "log" in (f.text or ""))
    assert "\x1b" not in xml and "[31m" not in xml
    assert failure.text is not None and failure.text.startswith("log ")


def test_junit_rendering_grows_linearly_with_the_stages() -> None:
    """Once quadratic (`entries()` per stage): 8,000 stages took 4.4 s, 50,000 never ended."""
    def seconds(n: int) -> float:
        cell = make_cell("verified")
        stages = [StageResult(name="import", status=Status.PASSED)] * n
        run = RunResults(run_id="r", started="2025-01-01T00:00:00+00:00",
                         cells=[cell.model_copy(update={"stages": stages})])
        # CPU time, not wall time: `nox -s tests` runs the unit tier beside others on the same cores, and a wait
        # for the CPU in the middle of one measurement is no growth of the renderer's work.
        start = time.process_time()
        junit.render(vouched(run))
        return time.process_time() - start
    seconds(500)  # warm up
    small, large = min(seconds(1500) for _ in range(3)), min(seconds(6000) for _ in range(3))
    assert large < small * 8, (small, large)  # 4x the stages: about 4x the time, not 16x


def test_html_shows_control_characters_instead_of_writing_them() -> None:
    page = html.render(vouched(hostile_run("\x1b[31mred\x00")))
    assert "\x1b" not in page and "\x00" not in page and "red\\x00" in page


def test_a_cell_with_more_stages_than_any_record_is_refused(tmp_path: Path) -> None:
    run = make_run()
    data = json.loads(run.model_dump_json())
    data["cells"][0]["stages"] = data["cells"][0]["stages"] * 200
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="stages: List should have at most 1000 items"):
        results.load(path)


# ---------------------------------------------------------------- numbers and schema


@pytest.mark.parametrize(("raw", "needle"), [
    ("NaN", "NaN is not a finite number"), ("Infinity", "Infinity is not a finite number"),
    ("-Infinity", "-Infinity is not a finite number"), ("1e999", "1e999 is not a finite number"),
])
def test_numbers_json_cannot_hold_are_refused(raw: str, needle: str, tmp_path: Path) -> None:
    text = make_run().model_dump_json().replace('"duration_s":321.0', f'"duration_s":{raw}', 1)
    assert raw in text
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ResultsError, match=needle):
        results.load(path)


def test_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(make_run().model_dump_json().replace('"run-1"', '"run\\ud800"'))
    with pytest.raises(ResultsError, match="lone surrogate"):
        results.load(path)


@pytest.mark.parametrize("version", ["true", "false", "1.0", '"1"'])
def test_a_schema_version_that_is_no_integer_is_refused(version: str, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(make_run().model_dump_json().replace('"schema_version":2', f'"schema_version":{version}'))
    with pytest.raises(ResultsError, match="is not supported"):
        results.load(path)


def test_the_reports_own_results_file_reads_again(tmp_path: Path) -> None:
    run = make_run()   # once: a record made twice may differ in its timestamps
    written = report.render_all(vouched(run), tmp_path / "out", env={})
    assert results.load(written["json"]) == run


# ---------------------------------------------------------------- the report set: whole or nothing


def set_of(out: Path) -> set[str]:
    """The run id every file of the set names (one, when the set is whole)."""
    found = {json.loads((out / "results.json").read_text())["run_id"]}
    found.add(ET.parse(out / "junit.xml").getroot().get("name", "").split()[-1])
    found |= {run for run in ("old", "new") if f"results of {run}" in (out / "compat.md").read_text()}
    return found


def test_a_report_replaces_the_whole_set_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    report.render_all(vouched(make_run("old")), out, env={})
    (out / "stale.txt").write_text("from an older version")
    report.render_all(vouched(make_run("new")), out, env={})
    assert sorted(p.name for p in out.iterdir()) == sorted(SET) and set_of(out) == {"new"}
    assert [p.name for p in tmp_path.iterdir()] == ["reports"]


@pytest.mark.parametrize("fails_at", [1, 3, 6])
def test_a_report_that_fails_half_way_keeps_the_old_set(fails_at: int, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills at the n-th file of the set: the old set stays whole (it was half replaced)."""
    out = tmp_path / "reports"
    report.render_all(vouched(make_run("old")), out, env={})
    disk_fills_at(monkeypatch, fails_at)
    with pytest.raises(OSError, match="No space left"):
        report.render_all(vouched(make_run("new")), out, env={})
    monkeypatch.undo()
    assert set_of(out) == {"old"} and [p.name for p in tmp_path.iterdir()] == ["reports"]


def test_reports_into_a_linked_folder_replace_the_target(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "reports").symlink_to(tmp_path / "real")
    report.render_all(vouched(make_run("old")), tmp_path / "reports", env={})
    report.render_all(vouched(make_run("new")), tmp_path / "reports", env={})
    assert (tmp_path / "reports").is_symlink() and set_of(tmp_path / "real") == {"new"}


def test_without_an_atomic_exchange_the_old_set_is_moved_aside(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk, "_exchange", lambda a, b: False)  # a file system without RENAME_EXCHANGE
    out = tmp_path / "reports"
    report.render_all(vouched(make_run("old")), out, env={})
    report.render_all(vouched(make_run("new")), out, env={})
    assert set_of(out) == {"new"} and [p.name for p in tmp_path.iterdir()] == ["reports"]


def test_an_unwritable_step_summary_is_named_as_such(tmp_path: Path) -> None:
    results.save(make_run("run-a"), tmp_path / "runs" / "a" / "results.json")
    (tmp_path / "README.md").write_text(f"{markdown.START}\n{markdown.END}\n")
    summary = tmp_path / "summary-is-a-folder"
    summary.mkdir()
    with pytest.raises(ConfigError) as exc:
        call(report_command, ["--out", str(tmp_path / "out")], Workspace.at(tmp_path),
             {"GITHUB_STEP_SUMMARY": str(summary)})
    assert "$GITHUB_STEP_SUMMARY" in exc.value.message and "--out" not in exc.value.message
    assert not (tmp_path / "out").exists()  # said before the reports were written


# ---------------------------------------------------------------- finding results files


@pytest.mark.timeout(20)
def test_a_recursive_glob_does_not_follow_symlink_loops(tmp_path: Path) -> None:
    found = tmp_path / "evidence" / "h200"
    found.mkdir(parents=True)
    results.save(make_run(), found / "results.json")
    for name in ("a", "b"):
        (tmp_path / "evidence" / name).symlink_to(".")  # glob.glob(recursive=True) walked these forever
    box: list[list[Path]] = []
    worker = threading.Thread(target=lambda: box.append(report.find_results([f"{tmp_path}/evidence/**/results.json"])),
                              daemon=True)
    worker.start()
    worker.join(10)
    assert box == [[found / "results.json"]]


def test_hidden_folders_are_not_searched_unless_named(tmp_path: Path) -> None:
    for folder in ("runs/a", "runs/.reports.new-x"):
        results.save(make_run(), tmp_path / folder / "results.json")
    assert disk.glob_files([f"{tmp_path}/runs/*/results.json"]) == [tmp_path / "runs/a/results.json"]
    assert disk.glob_files([f"{tmp_path}/runs/.*/results.json"]) == [tmp_path / "runs/.reports.new-x/results.json"]
    assert os.path.exists(tmp_path / "runs/a/results.json")


def test_half_sets_of_killed_writers_are_swept_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    dead = tmp_path / ".reports.new-999999999-abc"  # no such process: a writer killed before its swap
    dead.mkdir()
    live = tmp_path / f".reports.new-{os.getpid()}-abc"  # a writer at work (this process)
    live.mkdir()
    report.render_all(vouched(make_run("new")), out, env={})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["reports", live.name])
