"""Hint templates: what a log showed reaches the fix hint; a template that cannot be filled is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts.errors import ConfigError
from buildscripts.verify import classify, hints

TEMPLATE = "{header} is missing[[ (Python {python})]]: install python3-dev[[, here python{python}-dev]]."
DEFAULTS = {"header": "Python.h"}


def test_captured_values_fill_the_template_and_optional_parts_need_theirs() -> None:
    assert hints.render(TEMPLATE, {"header": "pyconfig.h", "python": "3.12"}, DEFAULTS) == (
        "pyconfig.h is missing (Python 3.12): install python3-dev, here python3.12-dev.")
    assert hints.render(TEMPLATE, {}, DEFAULTS) == "Python.h is missing: install python3-dev."
    assert hints.render(TEMPLATE, {"python": ""}, DEFAULTS) == "Python.h is missing: install python3-dev."


def test_a_captured_value_is_one_line_without_quotes_and_cut_when_long() -> None:
    assert hints.clean(" 'cuda_fp8.h'\n") == "cuda_fp8.h"
    assert hints.clean("a\tb\x00c") == "a b c"
    long = hints.clean("_ZN3c10" + "x" * 500)
    assert len(long) == hints.MAX_VALUE
    assert long.endswith("…")


@pytest.mark.parametrize(("template", "defaults", "groups", "problem"), [
    ("needs {version}", {}, {"version"}, "no default"),
    ("needs {version}", {"version": "v"}, set(), "captured by no pattern"),
    ("needs it", {}, {"version"}, "not used in the hint"),
    ("needs it[[ now]]", {}, set(), "without a {name}"),
    ("needs [[{a}[[{b}]]]]", {}, {"a", "b"}, "nested"),
    ("needs [[{a}", {}, {"a"}, "unbalanced"),
    ("needs {a} and }", {"a": "x"}, {"a"}, "not a {name} placeholder"),
    ("needs [[{a}]]", {"a": "x"}, {"a"}, ""),
    ("needs {a}", {"a": "x", "b": "y"}, {"a"}, "does not use"),
])
def test_a_template_that_cannot_be_filled_is_named(template: str, defaults: dict[str, str], groups: set[str],
                                                    problem: str) -> None:
    found = hints.problems(template, defaults, groups)
    if problem:
        assert any(problem in p for p in found), found
    else:
        assert found == []


def catalogue(tmp_path: Path, body: str) -> classify.Catalogue:
    path = tmp_path / "failures.yaml"
    path.write_text("schema: 1\nclasses:\n" + body)
    return classify.load(path)


def test_named_groups_and_extract_carry_the_log_into_the_hint(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, (
        "- id: header\n  stage: jit-compile\n  title: t\n  sources: [s]\n"
        "  patterns: ['fatal error: (?P<header>\\w+\\.h): No such file']\n"
        "  extract: ['python(?P<python>3\\.\\d+)']\n"
        "  captures: {header: a header}\n"
        "  hint: '{header} is missing[[ for Python {python}]].'\n"))
    log = "gcc -I/usr/include/python3.11 x.c\nx.c:1:10: fatal error: Python.h: No such file or directory"
    match = cat.classify(log)
    assert match.id == "header"
    assert match.captured == {"header": "Python.h", "python": "3.11"}
    assert match.hint == "Python.h is missing for Python 3.11."
    assert cat.classify("fatal error: pyconfig.h: No such file").hint == "pyconfig.h is missing."


def test_a_catalogue_whose_hint_does_not_fit_its_patterns_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no default"):
        catalogue(tmp_path, "- {id: x, stage: import, title: t, patterns: ['(?P<v>\\d+)'], hint: 'needs {v}',"
                            " sources: [s]}\n")
    with pytest.raises(ConfigError, match="names no group"):
        catalogue(tmp_path, "- {id: x, stage: import, title: t, patterns: [a], extract: ['b'], hint: h,"
                            " sources: [s]}\n")


def test_the_name_of_a_group_is_not_counted_as_text_to_find() -> None:
    assert classify.literal_weight(r"(?P<arch>sm_\d+)") == classify.literal_weight(r"(sm_\d+)") == 3
    assert classify.literal_weight(r"(?P<p>\w+) and (?P=p)") == 5
