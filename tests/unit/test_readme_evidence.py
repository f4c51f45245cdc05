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
    shown = report.weighed_from(paths, ws.matrix, weigh.committed_keys(ROOT))
    hint = "run `nox -s report -- --update-readme` and commit README.md and docs/compatibility.md"
    assert markdown.readme_block(shown) == readme_block(), hint
    assert markdown.document(shown) == (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8"), hint


def details() -> str:
    return (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")


def test_no_committed_record_is_dropped_and_none_is_shown_for_more_than_it_is() -> None:
    text = details()
    line = next(line for line in text.splitlines()
                if line.startswith("- `sglang0.5.16-torch2.11.0-cu130-system13.0-ubuntu24.04@lxc-ct-good`"))
    assert "🔓" in line and "✅" not in line   # unsealed: shown, never as verified
    # another image verified under the pip cell's name (made from an H200 machine's own root): its own row, foreign
    line = next(line for line in text.splitlines()
                if line.startswith("- `sglang0.5.16-torch2.11.0-cu130-pip-bookworm@foreign-image`"))
    assert "👽" in line and "✅" not in line
    # the README's answer never counts it for the pip cell
    assert "@foreign-image" not in readme_block()


def test_the_readme_keeps_the_answer_only() -> None:
    block = readme_block()
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(block.splitlines()) <= 40
    marks = {m for m in ("✅", "☑️", "❌", "⚠️", "—", "🔓", "🔏", "🧭", "👽", "🗣️", "🕰️", "❔", "🚫", "📦", "❗", "⏭️")
             if m in block}
    assert len(marks) <= 5, marks
    assert sum(1 for line in lines if "✅ =" in line or "counts ([trust.md]" in line) <= 3
    assert "linux/arm64" in block and "linux/amd64" in block
