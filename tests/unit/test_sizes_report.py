"""reports/sizes.md and the benchmark page's size table from records whose text is hostile: a pipe inside a code
span must not split a table cell, and no escape or control byte of a record reaches the Markdown."""

from __future__ import annotations

import re
from typing import Any

import pytest

from buildscripts.report import sizes
from buildscripts.results import RunResults

HOSTILE = ["a|b", "x`|`y", "\x1b[31mred\x1b[0m", "line\rover", "nul\x00byte", "two\nlines", "bell\x07", "\\|", "<b>"]
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def cells(row: str) -> list[str]:
    """A Markdown table row's cells, split as a renderer splits them (on pipes no backslash escapes)."""
    return UNESCAPED_PIPE.split(row.strip())[1:-1]


def run_with(text: str) -> RunResults:
    facts: dict[str, Any] = {"name": "facts", "status": "passed", "evidence": {
        "pruned_fatbins": {"libraries": text, "saved_bytes": 1_000_000_000, "dropped_archs": [text]},
        "warm_caches": {"archs": [text], "modules": text, "first_start": [text]},
        "largest_packages": [[text, 1_000_000_000]]}}
    image = {"ref": f"img:{text}", "size_bytes": 7_900_000_000, "layers": {text: 3_890_000_000}}
    return RunResults.model_validate({"run_id": "r", "started": "2026-11-30T10:00:00+00:00", "cells": [
        {"cell_id": f"cell{text}", "image": image, "stages": [facts]}]})


@pytest.mark.parametrize("text", HOSTILE)
def test_the_sizes_page_keeps_its_table_whatever_a_record_says(text: str) -> None:
    page = sizes.document(run_with(text))
    assert not RAW.search(page), f"a raw control byte reached the page: {page!r}"
    header, _, row = page.splitlines()[2:5]
    assert len(cells(row)) == len(cells(header)) == 8, row


@pytest.mark.parametrize("text", HOSTILE)
def test_the_benchmark_table_keeps_its_columns(text: str) -> None:
    one = sizes.ImageSizes(f"img:{text}", 9_610_000_000, (sizes.Part(text, 4_700_000_000),),
                           (sizes.Part(text, 3_072_000_000),))
    table = sizes.markdown([one])
    header, _, row = table.splitlines()
    assert not RAW.search(table) and len(cells(row)) == len(cells(header)) == 4, row


def test_control_bytes_are_shown_not_written_and_plain_names_stay_code() -> None:
    page = sizes.document(run_with("nul\x00byte"))
    assert "nul\\\\x00byte" in page   # shown as \x00 (its backslash escaped for Markdown)
    plain = sizes.document(run_with("ok"))
    assert "| `cellok` | `img:ok` |" in plain and "`ok` 1.00 GB" in plain
