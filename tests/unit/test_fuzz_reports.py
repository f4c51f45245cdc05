"""Properties of results files and reports over generated hostile records (issue 27): a saved record reads back
as itself; every text from the results stays text in the console table, the Markdown (one pair of README
markers, no HTML but the renderer's own), the HTML (no element but the renderer's own) and JUnit (well-formed
XML); a report interrupted at any file leaves the old set whole; numbers JSON cannot hold are refused."""

from __future__ import annotations

import io
import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from buildscripts import report, results
from buildscripts.errors import ResultsError
from buildscripts.probe.core import RESULT_PREFIX
from buildscripts.report import console, html, junit, markdown
from buildscripts.results import CellResult, RunResults, StageResult, Status
from buildscripts.verify import output
from tests.results_factory import ALL_KINDS, finish, make_cell, make_run, vouched
from tests.unit.fuzzing import FUZZ, HOSTILE, disk_fills_at, examples

EXAMPLES = examples(60)
# Text as hostile as it gets: markup of every format, control characters, the README markers, and anything.
MARKUP = ["<script>alert(1)</script>", "`", "``", "|", "\n", "\r\n", "\x1b[31m", "\x00", "\x0b", "&amp;", "&#96;",
          "]]>", "<!--", "-->", markdown.START, markdown.END, "[x](javascript:1)", "\u2028", "\ufffe", "'\""]
# No lone surrogate: none can enter a record (a results file holding one is refused, probe output is cleaned of
# them: see test_probe_output_loses_lone_surrogates), and records are made here past the validators.
TEXT = st.one_of(st.sampled_from([t for t in HOSTILE if "\ud800" not in t] + MARKUP),
                 st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
                 st.lists(st.sampled_from([*MARKUP, "a", " "]), max_size=6).map("".join))
NUMBER = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
RENDERED_TAGS = {"br", "code", "details", "summary"}  # what markdown.py itself writes


@st.composite
def hostile_cell(draw: st.DrawFn) -> CellResult:
    cell = make_cell(draw(st.sampled_from(ALL_KINDS)))
    stages = [s.model_copy(update={
        "reason": draw(st.one_of(st.none(), TEXT)), "log_excerpt": draw(st.one_of(st.none(), TEXT)),
        "duration_s": draw(NUMBER), "gpu": draw(TEXT) if s.gpu else None,
    }) for s in cell.stages]
    stages += [StageResult(name=draw(TEXT), status=draw(st.sampled_from(list(Status))), reason=draw(TEXT),
                           where=draw(TEXT), hint=draw(st.one_of(st.none(), TEXT)))
               for _ in range(draw(st.integers(0, 2)))]
    axes = {**cell.axes, **draw(st.dictionaries(st.sampled_from(["base", "lane", "toolkit", "sglang"]), TEXT))}
    return finish(cell, cell_id=draw(TEXT), stages=stages, axes=axes, excluded=cell.excluded and draw(TEXT))


@st.composite
def hostile_run(draw: st.DrawFn) -> RunResults:
    cells = draw(st.lists(hostile_cell(), min_size=1, max_size=3))
    return RunResults(run_id=draw(TEXT), started="2025-01-01T00:00:00+00:00", finished=draw(TEXT),
                      runner=draw(TEXT), cells=cells)


# ---------------------------------------------------------------- results files


@FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
@given(run=hostile_run())
def test_a_saved_record_reads_back_as_itself(run: RunResults, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("save") / "results.json"
    results.save(run, path)
    assert results.load(path) == run


@FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
@given(number=st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400", "1" + "0" * 400 + ".0"]),
       where=st.sampled_from(['"duration_s":321.0', '"size_bytes":9876543210', '"schema_version":2']))
def test_numbers_json_cannot_hold_are_refused_wherever_they_are(number: str, where: str,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    key = where.split(":", maxsplit=1)[0]
    text = make_run().model_dump_json().replace(where, f"{key}:{number}", 1)
    path = tmp_path_factory.mktemp("nan") / "results.json"
    path.write_text(text)
    with pytest.raises(ResultsError) as exc:
        results.load(path)
    assert str(path) in exc.value.message
    assert not math.isfinite(float(number)) or "is not supported" in exc.value.message


def test_probe_output_loses_lone_surrogates() -> None:
    """A file name of undecodable bytes in the image reaches the probe's JSON as `\\udcff`: once saved with it,
    results.save crashed (UTF-8 cannot hold it)."""
    raw = output.result_of(RESULT_PREFIX + json.dumps({"name": "facts", "status": "passed", "reason": "x\udcff"}))
    assert raw is not None and raw["reason"] == "x\ufffd"


# ---------------------------------------------------------------- every format


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.text += [v or "" for _, v in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def html_tags(text: str) -> Tags:
    parser = Tags()
    parser.feed(text)
    parser.close()
    return parser


@FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
@given(run=hostile_run())
def test_markdown_keeps_one_pair_of_markers_and_no_html_of_its_own(run: RunResults,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    readme = tmp_path_factory.mktemp("readme") / "README.md"
    readme.write_text(f"# x\n{markdown.START}\n{markdown.END}\ntail\n")
    for _ in range(2):
        markdown.update_readme(readme, vouched(run))
    text = readme.read_text()
    assert (text.count(markdown.START), text.count(markdown.END)) == (1, 1) and text.endswith("\ntail\n")
    table = markdown.table(vouched(run))
    assert set(html_tags(table).tags) <= RENDERED_TAGS
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", table)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert all(line.endswith(" |") for line in rows)  # no row broken by a line break from the results


@FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
@given(run=hostile_run())
def test_html_has_only_the_renderers_elements(run: RunResults) -> None:
    page = html.render(vouched(run))
    parsed = html_tags(page)
    assert parsed.tags.count("script") == 1 and "img" not in parsed.tags and "a" not in parsed.tags
    assert not any(re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", t) for t in parsed.text)


@FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
@given(run=hostile_run())
def test_junit_is_well_formed(run: RunResults) -> None:
    root = ET.fromstring(junit.render(vouched(run)))
    assert int(root.get("tests", "0")) == len(root.findall(".//testcase"))


@FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
@given(run=hostile_run(), width=st.sampled_from([40, 120, 300]))
def test_the_console_table_prints_any_record(run: RunResults, width: int) -> None:
    console.summary(vouched(run), Console(file=io.StringIO(), width=width, emoji=False))


# ---------------------------------------------------------------- interrupted writes


@FUZZ.__class__(FUZZ, max_examples=examples(30))
@given(run=hostile_run(), fails_at=st.integers(1, 8))
def test_an_interrupted_report_leaves_the_old_set_whole(run: RunResults, fails_at: int,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A write that fails at the n-th file (a full disk, a kill) leaves the old set; past the last, the new."""
    root = tmp_path_factory.mktemp("sets")
    out = root / "reports"
    report.render_all(vouched(make_run("old")), out, env={})
    with pytest.MonkeyPatch.context() as patch:
        disk_fills_at(patch, fails_at)
        try:
            report.render_all(vouched(run), out, env={})
            finished = True
        except OSError:
            finished = False
    stored = json.loads((out / "results.json").read_text())["run_id"]
    assert stored == (run.run_id if finished else "old")
    assert [p.name for p in root.iterdir()] == ["reports"]  # no half set beside it
