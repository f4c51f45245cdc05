"""The README's compatibility table is the committed evidence rendered: it can never drift from it."""

from __future__ import annotations

from pathlib import Path

from buildscripts import report
from buildscripts.report import markdown, weigh
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = text.index(markdown.START) + len(markdown.START), text.index(markdown.END)
    return text[start:end].strip("\n")


def test_the_readme_table_is_the_committed_evidence_rendered() -> None:
    ws = Workspace.at(ROOT)
    paths = report.find_results(report.readme_results(ws))
    # every host-judged run under evidence/*/runs/ is read, not only each folder's own results.json
    assert any(p.parent.parent.name == "runs" for p in paths)
    shown = report.weighed_from(paths, ws.matrix, weigh.committed_keys(ROOT), named=False, allow_other=False)
    assert markdown.table(shown) == readme_block(), "run `nox -s report -- --update-readme` and commit README.md"


def test_no_committed_record_of_another_matrix_is_dropped_from_the_readme() -> None:
    block = readme_block()
    line = next(line for line in block.splitlines()
                if line.startswith("- `sglang0.5.16-torch2.11.0-cu130-system13.0-ubuntu24.04@lxc-ct-good`"))
    assert "🧭" in line and "✅" not in line
    # sealed on an H200 under the matrix before linux/arm64 was declared and not run again since: still shown, as
    # another matrix's, never as verified, until it is verified again under this one
    line = next(line for line in block.splitlines() if line.startswith("- `lxc@lxc-u-lo-down`"))
    assert "🧭" in line and "✅" not in line and "another matrix" in line


def test_a_record_verified_again_under_this_matrix_decides_and_the_older_one_is_left_aside() -> None:
    block = readme_block()
    for cell in ("host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit", "lxc@lxc-u-good"):
        line = next(line for line in block.splitlines() if line.startswith(f"- `{cell}`"))
        assert "✅ verified sm_90" in line and "🧭" not in line.split("—")[0], line
    line = next(line for line in block.splitlines()
                if line.startswith("- `host-h200-sglang0.5.16-torch2.11.0-cu130-toolkit`"))
    assert "run h200-host-sandbox (another matrix)" in line   # the 2026-12-01 record, left aside
