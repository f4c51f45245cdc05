"""Hostile matrix files: each input that once gave a traceback, hung, or was wrongly accepted now gets a
ConfigError that names the file (and the line where there is one)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from buildscripts import cli, matrix
from buildscripts.errors import ConfigError
from buildscripts.matrix import checks, spellings, yamlfile
from buildscripts.verify import classify

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "matrix.yaml").read_text()


def error_of_bytes(data: bytes, tmp_path: Path) -> str:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as exc:
        matrix.load(path, {})
    assert str(path) in exc.value.message
    return exc.value.message


def error_of(text: str, tmp_path: Path) -> str:
    return error_of_bytes(text.encode(), tmp_path)


def edited(change: dict[str, object]) -> str:
    data = yaml.safe_load(DEFAULT)
    data.update(change)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# ---------------------------------------------------------------- what the file is


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "matrix.yaml"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes: never here
    with pytest.raises(ConfigError, match="not a regular file"):
        matrix.load(fifo, {})


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        matrix.load(tmp_path, {})


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    message = error_of("x: [" + "1," * (yamlfile.MAX_BYTES // 2) + "1]\n", tmp_path)
    assert "larger than 1024 KiB" in message


@pytest.mark.parametrize(("data", "needle"), [
    (DEFAULT.encode("utf-16"), "UTF-16"),
    (DEFAULT.encode("utf-16-le"), "UTF-16"),
    (DEFAULT.encode("latin-1"), "matrix.yaml:1: byte 0xd7 is not UTF-8"),  # the × of the first line
    (b"schema: 1\n# caf\xe9\n", "matrix.yaml:2: byte 0xe9 is not UTF-8"),
])
def test_text_that_is_not_utf8_names_the_encoding_or_line(data: bytes, needle: str, tmp_path: Path) -> None:
    assert needle in error_of_bytes(data, tmp_path)


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x85", "\x9f", "\x7f"])
def test_control_characters_name_line_and_column(char: str, tmp_path: Path) -> None:
    message = error_of(DEFAULT.replace("suite: bookworm", f"suite: book{char}worm"), tmp_path)
    assert re.search(r"matrix\.yaml:10:\d+: control character", message), message


def test_a_utf8_bom_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + DEFAULT.encode())
    assert matrix.load(path, {}).cells


# ---------------------------------------------------------------- what the YAML is


def test_deep_nesting_is_refused_without_recursing(tmp_path: Path) -> None:
    assert "nested deeper than 32 levels" in error_of("x: " + "[" * 100 + "]" * 100 + "\n", tmp_path)
    assert "nested deeper than 32 levels" in error_of("x:\n" + "- " * 100 + "1\n", tmp_path)
    for text in ("x: " + "[" * 10_000 + "]" * 10_000, "x: " + "{a: " * 10_000):  # libyaml stops at 1,000 itself
        assert re.search("nested deeper than|maximum nesting depth", error_of(text + "\n", tmp_path))


def test_too_many_values_are_refused(tmp_path: Path) -> None:
    assert "more than 50000 values" in error_of("x: [" + "1," * 60_000 + "1]\n", tmp_path)


def test_an_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    assert "expands to more than" in error_of("\n".join(lines) + "\n", tmp_path)


def test_huge_integers_name_the_line(tmp_path: Path) -> None:
    message = error_of(DEFAULT.replace("timeout_s: 900\n", "timeout_s: " + "9" * 4301 + "\n", 1), tmp_path)
    assert re.search(r":\d+:\d+: malformed YAML: integer of 4301 characters", message), message


def test_impossible_timestamps_are_an_error_with_the_line(tmp_path: Path) -> None:
    assert re.search(r":2:\d+: malformed YAML: cannot read '2026-13-45'", error_of("schema: 1\nx: 2026-13-45\n",
                                                                                  tmp_path))


def test_duplicate_keys_are_errors_with_both_lines(tmp_path: Path) -> None:
    text = DEFAULT.replace("schema: 1\n", "schema: 1\nplatforms: {}\n", 1)
    message = error_of(text, tmp_path)
    first = DEFAULT.splitlines().index("platforms:") + 2
    assert "duplicate key 'platforms' (first at line 5)" in message and f"matrix.yaml:{first}:" in message


def test_nested_duplicate_keys_are_errors(tmp_path: Path) -> None:
    text = DEFAULT.replace("    timeout_s: 900\n", "    timeout_s: 900\n    timeout_s: 60\n", 1)
    assert "duplicate key 'timeout_s'" in error_of(text, tmp_path)


def test_reader_and_scanner_errors_are_config_errors(tmp_path: Path) -> None:
    assert "malformed YAML" in error_of("a: 'unclosed\n", tmp_path)
    assert "malformed YAML" in error_of("a: *nowhere\n", tmp_path)
    assert "malformed YAML" in error_of("? [a]\n: b\n", tmp_path)  # an unhashable key


# ---------------------------------------------------------------- what the matrix says


@pytest.mark.parametrize(("change", "needle"), [
    ({"torch_lanes": [{"torch": "2.9.1", "cuda": "cu128"}, {"torch": "2.9.1", "cuda": "cu128"}]},
     "torch lane torch2.9.1-cu128 is listed twice"),
    ({"sglang": [{"version": "0.5.10", "torch": "2.9.1"}, {"version": "0.5.10", "torch": "2.9.1"}]},
     "sglang 0.5.10 is listed twice"),
    ({"sglang": [{"version": "0.5.10", "torch": "2.9.1"}, {"version": "0.5.10", "torch": "2.11.0"}]},
     "pins torch 2.11.0 here and torch 2.9.1 in entry 0"),
    ({"sglang": [{"version": "１.２.３", "torch": "2.9.1"}]}, "sglang.0.version"),
    ({"torch_lanes": [{"torch": "2.٩.1", "cuda": "cu128"}]}, "torch_lanes.0.torch"),
    ({"archs": ["sm_٩٠a"]}, "is not a GPU target"),
    ({"archs": ["sm_90a\n"]}, "is not a GPU target"),
    ({"archs": ["sm_999"]}, "'sm_999' is not a known GPU target"),
    ({"archs": ["sm_80a"]}, "`a` targets start at sm_90a"),
    ({"archs": ["sm_90f"]}, "`f` targets at sm_100f"),
    ({"expect": [{"match": "*", "stage": "imprt", "reason": "r"}]}, "unknown stage 'imprt'; did you mean 'import'?"),
    ({"expect": [{"match": "*", "stage": "import", "class": "cuda-home-mising", "reason": "r"}]},
     "unknown failure class 'cuda-home-mising'; did you mean 'cuda-home-missing'?"),
    ({"expect": [{"match": "*", "stage": [], "reason": "r"}]}, "expect.0.stage"),
    ({"bases": {"x": {"image": "", "python": "3.11", "platform": "x86_64-manylinux_2_36"}}}, "bases.x.image"),
    ({"bases": {"bookworm": {"image": "debian", "python": "3.11", "platform": "x86_64-manylinux_2_٣٦"}}},
     "bases.bookworm.platform"),
])
def test_wrong_content_is_refused(change: dict[str, object], needle: str, tmp_path: Path) -> None:
    message = error_of(edited(change), tmp_path)
    assert needle in message
    assert re.search(r"line \d+: ", message), message


def test_cell_ids_that_collide_are_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT)
    data["bases"] = {"bookworm": data["bases"]["bookworm"], "x-bookworm": data["bases"]["bookworm"]}
    data["toolkits"] = {"none": data["toolkits"]["none"], "none-x": data["toolkits"]["none"]}
    message = error_of(yaml.safe_dump(data), tmp_path)
    assert "two cells have the id 'sglang0.5.10-torch2.9.1-cu128-none-x-bookworm'" in message


def test_every_arch_this_project_names_is_known() -> None:
    for arch in ("sm_90a", "sm_100a", "sm_100f", "sm_103a", "sm_110a", "sm_120a", "sm_121a", "sm_80", "sm_70"):
        assert spellings.arch_problem(arch) is None, arch


def test_the_class_ids_read_here_are_the_catalogues() -> None:
    assert checks.failure_classes() == {c.id for c in classify.load().classes}


# ---------------------------------------------------------------- what the user sees


def test_markup_in_user_values_is_printed_literally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(edited({"archs": ["[/]", "[bold]sm_90a"]}))
    assert cli.main(["matrix", "--matrix", str(path)], {}) == 2
    err = capsys.readouterr().err
    assert "'[/]' is not a GPU target" in err


def test_only_with_markup_is_a_selection_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["matrix", "--only", "[/]"], {}) == 3
    assert "--only '[/]'" in capsys.readouterr().err
    assert cli.main(["matrix", "--only", "[[]bold]"], {}) == 3
    assert "[[]bold]" in capsys.readouterr().err


def test_a_matrix_file_name_with_markup_is_shown_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "[red]m.yaml"
    path.write_text(DEFAULT)
    assert cli.main(["matrix", "--all", "--matrix", str(path)], {}) == 0
    assert "cell(s) from [red]m.yaml" in capsys.readouterr().out


def test_the_pattern_and_the_value_are_printed_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(DEFAULT.replace("version: 0.5.10,", "version: '[bold]x',"))
    assert cli.main(["matrix", "--matrix", str(path)], {}) == 2
    err = capsys.readouterr().err
    assert r"pattern '^[0-9]+(\.[0-9]+){1,3}([a-z0-9.+-]*)$' (got '[bold]x')" in err


def test_a_server_timeout_over_a_day_is_refused(tmp_path: Path) -> None:
    assert "profiles.default.timeout_s" in error_of(DEFAULT.replace("timeout_s: 900", "timeout_s: 10000000", 1),
                                                    tmp_path)
