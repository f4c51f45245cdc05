"""Every time or test count the README and docs/ state comes with the file it was measured into: a committed
results file under benchmarks/ or evidence/, written by the tool that measured it, named in the same paragraph,
table or list, or in the one just before it (a table's introduction), and holding that number (as the page
rounds it; each end of a range). A number without its file is a claim nobody can check, and one its file does
not hold has gone stale (the README once said 29 min and 711 tests long after both had changed).

What counts: a duration (`61 s`, `2.2 s`, `52–63 s`, `24 min`, `3 hours`) or a count of tests (`1185 passed`,
`3 skipped`, `1167 tests`), outside fenced code and outside the README's generated table (rendered from
evidence/ by `nox -s report`). Numbers that are settings rather than measurements are on the list below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildscripts.report import markdown

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s?[–-]\s?\d+(?:[.,]\d+)?)?"
CLAIM = re.compile(rf"{NUMBER}\s?(?:ms|s|min|minutes?|seconds?|hours?|h)\b"
                   rf"|{NUMBER}\s+(?:tests|passed|skipped|failed)\b")
FILE = re.compile(r"\b(?:benchmarks|evidence)/[\w.-]+(?:/[\w.-]+)*")
GENERATED = re.compile(f"{re.escape(markdown.START)}.*?{re.escape(markdown.END)}", re.DOTALL)
FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
DECIMAL = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")

# (page, the text around the number) -> why it is not a measurement
SETTINGS = {
    ("release-watch.md", "`--timeout` (30 s)"): "the watch's default wait for the index, a setting",
    ("checking-an-image.md", "one deadline, 20 s"): "the registry deadline's default, a setting",
    ("checking-an-image.md", "did not answer within 20 s"): "the message that setting gives",
    ("checking-an-image.md", "(3 h ago)"): "an example of check's output, not a measurement",
    ("checking-an-image.md", "by more than **5 minutes**"): "the clock skew check allows (freshness.SKEW), a setting",
    ("trust.md", "clock plus 5 minutes (`SKEW`)"): "the clock skew check allows (freshness.SKEW), a setting",
    ("trust.md", "at most 30 s (`REAP_S`, a setting)"): "how long host mode's clean-up kills (reap.REAP_S), a setting",
}


def blocks(page: Path) -> list[str]:
    """The page's paragraphs, tables and lists (blank-line separated), code and generated text blanked out."""
    text = FENCED.sub(_blank, GENERATED.sub(_blank, page.read_text(encoding="utf-8")))
    return [block for block in re.split(r"\n\s*\n", text) if block.strip()]


def _blank(match: re.Match[str]) -> str:
    return "\n" * match[0].count("\n")  # blank lines keep blocks apart as they were


def unbacked(page: Path) -> list[str]:
    """The claims of `page` that no existing benchmarks/ or evidence/ file named in their block or the one before
    holds."""
    found: list[str] = []
    parts = blocks(page)
    for i, block in enumerate(parts):
        claims = [m for m in CLAIM.finditer(block)
                  if not any(name == page.name and around in block for name, around in SETTINGS)]
        if not claims:
            continue
        near = block + "\n" + (parts[i - 1] if i else "")
        files = [ROOT / f.rstrip(".") for f in FILE.findall(near) if (ROOT / f.rstrip(".")).exists()]
        held = _numbers(files)
        for m in claims:
            if not files or not all(_held(value, held) for value in DECIMAL.findall(m[0].replace(",", ""))):
                why = "no file named beside it" if not files else f"not in {', '.join(_shown(f) for f in files)}"
                found.append(f"{m[0]!r} ({why}) in: {' '.join(block[max(0, m.start() - 60):m.end() + 20].split())}")
    return found


def _numbers(files: list[Path]) -> set[float]:
    """Every number in the files (a folder: its Markdown, JSON, text and log files)."""
    paths = [q for f in files for q in (sorted(f.rglob("*")) if f.is_dir() else [f])
             if q.is_file() and q.suffix in {".md", ".json", ".txt", ".log"}]
    return {float(n) for q in paths for n in DECIMAL.findall(q.read_text(encoding="utf-8", errors="replace"))}


def _held(value: str, numbers: set[float]) -> bool:
    """`value` as the page writes it is a number of the file rounded to as many decimals (61 for 61.4)."""
    decimals = len(value.partition(".")[2])
    return any(abs(n - float(value)) <= 0.5 * 10 ** -decimals for n in numbers)


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_time_and_count_names_the_file_it_was_measured_into(page: Path) -> None:
    missing = unbacked(page)
    assert not missing, (f"{page.relative_to(ROOT)}: times or counts that no benchmarks/ or evidence/ file named "
                         "beside them holds (measure with a script in benchmarks/ and name its results file, or "
                         "drop the number):\n  " + "\n  ".join(missing))


def test_the_check_finds_what_it_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    runs = json.loads((ROOT / "benchmarks" / "main-job-results.json").read_text())["runs"]   # what the file holds now
    cold, warm = f"{runs['first']['wall_s']:.0f} s", f"{runs['second']['wall_s']:.1f} s"
    page.write_text("It took 61–65 s and 1290 passed.\n\nMeasured (`benchmarks/main-job-results.md`):\n\n"
                    f"| run | time |\n| --- | ---: |\n| cold | {cold} |\n| warm | {warm} |\n| tests | 29 min |\n"
                    "| warm | 2 s |\n\n```sh\nnox -s fast -n 0 tests/unit  # 9 s\n```\n\n"
                    "Backed by `benchmarks/no-such-file.md`: 3 min.\n")
    assert [claim.split(" in: ")[0] for claim in unbacked(page)] == [
        "'61–65 s' (no file named beside it)", "'1290 passed' (no file named beside it)",
        "'29 min' (not in benchmarks/main-job-results.md)", "'3 min' (no file named beside it)"]
