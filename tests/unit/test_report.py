"""Report rendering from results records: every format, merging, and bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from buildscripts import report, results
from buildscripts.commands import report as report_command
from buildscripts.errors import ConfigError, ResultsError
from buildscripts.report import bygpu, common, console, github, html, junit, markdown, merge, weigh
from buildscripts.results import RunResults, StageResult, Status, Verdict, notes
from buildscripts.workspace import Workspace
from tests.commands import call
from tests.results_factory import gpu_passed, make_cell, make_run, vouched

VERIFIED_ID = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"
CPU_ID = "sglang0.5.16-torch2.11.0-cu130-apt-bookworm"


def test_gpu_places_say_where_each_gpu_stage_ran_or_that_it_did_not() -> None:
    run = make_run()
    verified, cpu = run.cell(VERIFIED_ID), run.cell(CPU_ID)
    assert verified is not None and cpu is not None
    assert common.gpu_summary(verified, vouched=True) == "NVIDIA H200 (sm_90), in a container: all GPU stages"
    assert common.gpu_summary(cpu, vouched=True) == "not run on a GPU"
    assert all("NVIDIA H200 (sm_90)" in where for _, where in common.gpu_stage_places(verified))
    assert all(where.startswith("not run on a GPU") for _, where in common.gpu_stage_places(cpu))


def test_console_summary_marks_and_verdicts() -> None:
    out = Console(record=True, width=250, color_system=None)
    console.summary(vouched(make_run()), out)
    text = out.export_text()
    assert "✓" in text and "✕" in text and "~" in text
    assert "verified" in text and "cpu-checked" in text and "expected-failure" in text
    assert "at jit-compile (nvcc-arch-unsupported)" in text and "1 cell(s) excluded" in text
    assert "outcome: 1 cell(s) ended unexpectedly: exit 10" in text
    assert "hint" not in text   # the detail is in the reports, or with --verbose
    verbose = Console(record=True, width=250, color_system=None)
    console.summary(vouched(make_run()), verbose, verbose=True)
    assert "use a CUDA toolkit >= 12.8 for sm_120a" in verbose.export_text()


def test_nothing_says_verified_unless_judge_does() -> None:
    run = make_run(kinds=("cpu-checked",))
    run.cells[0] = run.cells[0].model_copy(update={"verdict": Verdict.VERIFIED})  # hand-edited: must not show
    page = _Collector()
    page.feed(html.render(vouched(run)))
    fixed = ["“verified” means", weigh.LEGEND_WORDS, common.ANSWER_LEGEND, common.ANSWER_LEGEND_WORDS, bygpu.ABOUT,
             *bygpu.HEADINGS, "and was it verified there"]  # headings and legends
    for text in (markdown.table(vouched(run)), "".join(page.text), junit.render(vouched(run))):
        for phrase in fixed:
            text = text.replace(phrase, "")
        assert "verified" not in text
    assert 'data-verdict="cpu-checked"' in html.render(vouched(run))


def test_markdown_table_rows_and_escaping() -> None:
    run = make_run()
    first = run.cells[0]
    run.cells[0] = first.model_copy(update={
        "excluded": None, "stages": [first.stages[0].model_copy(update={"reason": "a | b"}), *first.stages[1:]]})
    lines = markdown.stage_table(vouched(run))
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == len(run.cells) - 1  # the cell an exact pin rules out is said once, under the grid
    assert all(row in markdown.table(vouched(run)) for row in rows)
    header = lines[0]
    assert all(row.count(" | ") == header.count(" | ") for row in rows)
    verified = next(r for r in rows if VERIFIED_ID in r)
    assert "✅ verified" in verified and "NVIDIA H200 (sm_90)" in verified


def test_readme_table_rewritten_only_between_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nintro\n\n{markdown.START}\nold table\n{markdown.END}\n\n## Usage\nnox\n")
    assert markdown.update_readme(readme, vouched(make_run()))
    text = readme.read_text()
    assert text.startswith("# Title\n\nintro\n\n") and text.endswith(f"{markdown.END}\n\n## Usage\nnox\n")
    assert "old table" not in text and "sglang-images:0.5.16-torch2.11.0-cu130-pip-verified-sm90" in text
    assert not markdown.update_readme(readme, vouched(make_run()))  # idempotent


def test_readme_without_markers_is_a_clear_error(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n")
    with pytest.raises(ConfigError, match="no compatibility-table markers"):
        markdown.update_readme(readme, vouched(make_run()))
    assert readme.read_text() == "# Title\n"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []  # what a reader sees: not the style or script

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        if self.tags[-1:] not in (["style"], ["script"]) or data.strip() == "":
            self.text.append(data)


def test_html_is_self_contained_escaped_and_complete() -> None:
    run = make_run()
    page = html.render(vouched(run))
    parsed = _Collector()
    parsed.feed(page)
    assert parsed.tags.count("script") == 1  # ours; the <script> in a log excerpt is text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert page.count('class="cell-row"') == len(run.cells)
    for needle in ('id="f-verdict"', 'id="f-sglang"', 'id="f-lane"', 'id="f-toolkit"'):
        assert needle in page
    text = "".join(parsed.text)
    for needle in ("nvcc-arch-unsupported", "use a CUDA toolkit >= 12.8", "9.88 GB", "321.0 s",
                   "sha256:" + "ab" * 32, "flashinfer", "NVIDIA H200 (sm_90)", "not run on a GPU"):
        assert needle in text, needle


def test_junit_one_case_per_cell_and_stage() -> None:
    run = make_run()
    root = ET.fromstring(junit.render(vouched(run)))
    cases = root.findall(".//testcase")
    assert len(cases) == sum(1 + len(c.stages) for c in run.cells)
    failed = [c for c in cases if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [
        ("sglang0.5.16-torch2.11.0-cu130-pip-nocccl-bookworm", "jit-compile")]
    assert failed[0].find("failure").get("type") == "nvcc-arch-unsupported"  # type: ignore[union-attr]
    expected = next(c for c in cases if c.get("name") == "import"
                    and c.get("classname") == "sglang0.5.16-torch2.11.0-cu130-none-bookworm")
    assert "expected failure" in str(expected.find("skipped").get("message"))  # type: ignore[union-attr]
    assert root.get("tests") == str(len(cases)) and root.get("failures") == "1"


def test_github_summary_only_when_the_variable_is_set(tmp_path: Path) -> None:
    assert github.write_summary(vouched(make_run()), {}) is None
    target = tmp_path / "summary.md"
    assert github.write_summary(vouched(make_run()), {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert "## SGLang image compatibility" in target.read_text() and VERIFIED_ID in target.read_text()


def test_render_all_writes_every_format_and_json_round_trips(tmp_path: Path) -> None:
    run = make_run()
    written = report.render_all(vouched(run), tmp_path / "out", env={"GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")})
    assert set(written) == {"json", "schema", "markdown", "html", "junit", "sizes", "github"}
    assert results.load(written["json"]) == run
    schema = json.loads(written["schema"].read_text())
    assert "schema_version" in schema["properties"] and "StageResult" in schema["$defs"]


def _stage(name: str, status: Status, **extra: object) -> StageResult:
    return StageResult.model_validate({"name": name, "status": status, **extra})


def test_merge_newest_stage_wins_and_keeps_provenance() -> None:
    cpu_run = make_run("ci-run", "2025-01-01T00:00:00+00:00", kinds=("cpu-checked",))
    gpu_run = make_run("gpu-run", "2025-01-03T00:00:00+00:00", kinds=("cpu-checked",))
    gpu_run.runner = "h200-test-machine"
    gpu_run.cells[0] = gpu_run.cells[0].model_copy(update={"stages": gpu_passed()})  # only the GPU stages ran
    merged = merge.merge([gpu_run, cpu_run])  # order of the arguments does not matter
    cell = merged.cell(CPU_ID)
    assert cell is not None
    by_name = {s.name: s for s in cell.stages}
    assert by_name["facts"].run_id == "ci-run" and by_name["facts"].runner == "ci-runner-1"
    assert by_name["server"].run_id == "gpu-run" and by_name["server"].status is Status.PASSED
    assert by_name["server"].runner == "h200-test-machine"
    assert cell.run_id == "gpu-run"
    assert cell.verdict is Verdict.VERIFIED  # judged again from the merged stages
    assert merged.run_id == "merged:ci-run+gpu-run"


def test_merge_never_mixes_stages_of_different_images() -> None:
    old = make_run("old", "2025-01-01T00:00:00+00:00", kinds=("verified",))
    new = make_run("new", "2025-02-01T00:00:00+00:00", kinds=("verified",))
    # other build inputs (another candidate tag, another image id); the rebuilt image only ran facts and import
    rebuilt = new.cells[0].image.model_copy(update={"id": "sha256:rebuilt", "ref": "sglang-images:x-fedcba987654"})
    new.cells[0] = new.cells[0].model_copy(update={"image": rebuilt, "stages": new.cells[0].stages[:2]})
    merged = merge.merge([old, new])
    assert [s.name for s in merged.cells[0].stages] == ["facts", "import"]
    assert merged.cells[0].verdict is not Verdict.VERIFIED


def test_merge_newer_failure_replaces_older_pass() -> None:
    old = make_run("old", "2025-01-01T00:00:00+00:00", kinds=("verified",))
    new = make_run("new", "2025-02-01T00:00:00+00:00", kinds=("verified",))
    stages = list(new.cells[0].stages)
    stages[1] = _stage("import", Status.FAILED, failure_class="cuda-home-missing")
    new.cells[0] = new.cells[0].model_copy(update={"stages": stages})
    merged = merge.merge([old, new])
    assert merged.cells[0].verdict is Verdict.FAILED


def test_corrupted_and_old_schema_files_are_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "results.json"
    broken.parent.mkdir()
    broken.write_text('{"schema_version": 1, "run_id": ')
    with pytest.raises(ResultsError, match=str(broken)):
        merge.load_all([broken])
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{\x00")  # UTF-16, not UTF-8
    with pytest.raises(ResultsError, match=str(binary)):
        merge.load_all([binary])
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema_version": 0, "run_id": "x"}))
    with pytest.raises(ResultsError, match=f"{old}.*schema 0"):
        merge.load_all([old])
    wrong = tmp_path / "wrong.json"
    data = json.loads(make_run().model_dump_json())
    data["cells"][0]["stages"][0]["status"] = "great"
    wrong.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=f"{wrong}: corrupted results"):
        merge.load_all([wrong])


def test_main_merges_runs_and_evidence_and_leaves_the_readme_alone(tmp_path: Path) -> None:
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), tmp_path / "runs" / "a" / "results.json")
    evidence = make_run("h200", "2025-01-05T00:00:00+00:00", kinds=("cpu-checked",))
    results.save(evidence, tmp_path / "evidence" / "h200" / "runs" / "2025" / "results.json")
    readme = f"{markdown.START}\n{markdown.END}\n"
    (tmp_path / "README.md").write_text(readme)
    assert call(report_command, [], Workspace.at(tmp_path), env={}) == 0
    merged = results.load(tmp_path / "reports" / "results.json")
    assert isinstance(merged, RunResults) and merged.run_id == "merged:run-a+h200"
    assert (tmp_path / "README.md").read_text() == readme  # a tracked file: rewritten only when asked
    assert (tmp_path / "reports" / "compat.html").is_file() and (tmp_path / "reports" / "junit.xml").is_file()


def test_update_readme_renders_the_committed_evidence_not_runs(tmp_path: Path) -> None:
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), tmp_path / "runs" / "a" / "results.json")
    evidence = make_run("h200", "2025-01-05T00:00:00+00:00", kinds=("cpu-checked",))
    results.save(evidence, tmp_path / "evidence" / "h200" / "results.json")
    (tmp_path / "README.md").write_text(f"{markdown.START}\n{markdown.END}\n")
    assert call(report_command, ["--update-readme"], Workspace.at(tmp_path), env={}) == 0
    text = (tmp_path / "docs" / "compatibility.md").read_text()   # the README's block links it
    assert CPU_ID in text and "results of h200 " in text and "run-a" not in text
    assert "docs/compatibility.md" in (tmp_path / "README.md").read_text()
    assert results.load(tmp_path / "reports" / "results.json").run_id == "h200"


def test_update_readme_takes_results_when_named(tmp_path: Path) -> None:
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), tmp_path / "runs" / "a" / "results.json")
    readme = tmp_path / "docs" / "OTHER.md"
    readme.parent.mkdir()
    readme.write_text(f"{markdown.START}\n{markdown.END}\n")
    argv = ["--readme", str(readme), "--results", str(tmp_path / "runs" / "*" / "results.json")]
    assert call(report_command, argv, Workspace.at(tmp_path), env={}) == 0  # naming a README asks for it
    assert "results of run-a " in (readme.parent / "docs" / "compatibility.md").read_text()
    assert not (tmp_path / "README.md").exists()


def test_update_readme_without_evidence_is_a_clear_error(tmp_path: Path) -> None:
    results.save(make_run("run-a", "2025-01-01T00:00:00+00:00"), tmp_path / "runs" / "a" / "results.json")
    with pytest.raises(ResultsError, match="evidence"):
        call(report_command, ["--update-readme"], Workspace.at(tmp_path), env={})


def test_no_readme_contradicts_update_readme(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        call(report_command, ["--update-readme", "--no-readme"], Workspace.at(tmp_path), env={})
    assert exc.value.code == 2


def test_main_without_results_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no results files found"):
        call(report_command, [], Workspace.at(tmp_path), env={})


def test_a_reused_verification_says_where_it_came_from_in_every_report() -> None:
    cell = make_cell("cpu-checked").model_copy(update={"reused_from": "run r1 of 2026-11-30T10:00:00+00:00 on ci-1"})
    assert common.verdict_of(cell)[1].endswith("(verification reused: run r1 of 2026-11-30T10:00:00+00:00 on ci-1)")
    run = RunResults(run_id="r2", started="2026-11-30T11:00:00+00:00", cells=[cell])
    assert "verification reused: run r1" in markdown.document(vouched(run))
    assert "verification reused: run r1" in html.render(vouched(run))


def test_a_stage_warning_shows_in_every_report_and_keeps_the_verdict() -> None:
    """What a stage found that does not fail it (an optional extension built against another torch)."""
    cell = make_cell("expected-failure")
    text = "torch extension ABI mismatch: torchao/_C.abi3.so (torchao 0.9.0) does not load with torch 2.9.1"
    stages = [s.model_copy(update={"evidence": {"warnings": [text, 3]}}) if s.name == "arch-audit" else s
              for s in cell.stages]
    warned = cell.model_copy(update={"stages": stages})
    verdict, reason = common.verdict_of(warned)
    assert verdict is common.verdict_of(cell)[0]
    assert reason.endswith(f"; warning from arch-audit: {text}")
    assert notes.warnings(warned) == [("arch-audit", text)]   # a non-text entry is not shown
    run = RunResults(run_id="r", started="2026-12-01T10:00:00+00:00", cells=[warned])
    assert "warning from arch-audit: torch extension ABI mismatch" in markdown.document(vouched(run))
    assert "warning from arch-audit: torch extension ABI mismatch" in html.render(vouched(run))
