"""Property: any matrix file -- mutations of the real matrix.yaml at the byte, text and data level -- gives
either a valid matrix or a ConfigError with a message, through `nox -s matrix`'s own main; never a
traceback, never a run over 5 s (hypothesis deadline), and nothing written outside the temporary workspace."""

from __future__ import annotations

import codecs
import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from buildscripts.commands import matrix as matrix_command
from buildscripts.workspace import Workspace, checked_name
from tests.unit.fuzzing import DEFAULT, FUZZ, HOSTILE, TEXT, confined, examples, make_workspace, run

EXAMPLES = examples(520)
DATA = yaml.safe_load(DEFAULT)
LINES = DEFAULT.splitlines(keepends=True)
CODECS = ["utf-16", "utf-16-be", "utf-32", "latin-1", "cp1252", "shift_jis", "utf-8-sig", "utf-7"]
CONTROL = [chr(c) for c in (*range(0, 9), 11, 12, *range(14, 32), 127, *range(128, 160))]

# Values of every type, with hostile text in them: what a wrong type or a markup-laden value looks like.
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def data_mutation(draw: st.DrawFn) -> bytes:
    """Walk into the parsed matrix and replace, delete or add one value; dump it back as YAML."""
    data: Any = copy.deepcopy(DATA)  # parsed once: PyYAML's pure-Python loader took a third of the test
    node = data
    for _ in range(draw(st.integers(0, 4))):
        if isinstance(node, dict) and node:
            child = node[draw(st.sampled_from(sorted(node, key=str)))]
        elif isinstance(node, list) and node:
            child = node[draw(st.integers(0, len(node) - 1))]
        else:
            break
        if not isinstance(child, dict | list):
            break
        node = child
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node, key=str)))
        if action == "delete":
            del node[key]
        else:
            node[key if action == "replace" else draw(TEXT)] = draw(VALUES)
    elif isinstance(node, list) and node:
        index = draw(st.integers(0, len(node) - 1))
        if action == "delete":
            del node[index]
        elif action == "add":
            node.append(node[index] if draw(st.booleans()) else draw(VALUES))  # a repeat: duplicate entries
        else:
            node[index] = draw(VALUES)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def text_mutation(draw: st.DrawFn) -> bytes:
    """Edit the text: repeat, replace or drop lines, nest, insert controls, hostile tokens or huge numbers."""
    lines = list(LINES)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["repeat", "drop", "control", "token", "nest", "number", "line", "indent"]))
        if kind == "repeat":    # a repeated top-level or nested line: duplicate keys
            lines.insert(i, lines[i])
        elif kind == "drop":
            del lines[i]
        elif kind == "control":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(CONTROL)) + lines[i][at:]
        elif kind == "token":   # a scalar replaced by hostile text, quoted or not
            head, sep, _ = lines[i].partition(": ")
            token = draw(st.sampled_from(HOSTILE))
            lines[i] = f"{head}{sep or ': '}{draw(st.sampled_from([token, repr(token)]))}\n"
        elif kind == "nest":
            depth = draw(st.sampled_from([10, 40, 200, 2000, 20000]))
            lines[i] = "x: " + "[" * depth + ("]" * depth if draw(st.booleans()) else "") + "\n"
        elif kind == "number":
            head, _, _ = lines[i].partition(":")
            lines[i] = f"{head}: {draw(st.sampled_from(['9' * 4301, '-' + '1' * 70, '0x' + 'f' * 80, '1e99999']))}\n"
        elif kind == "line":
            lines[i] = draw(TEXT) + "\n"
        else:
            lines[i] = draw(st.sampled_from(["", " ", "\t", "  - "])) + lines[i]
    return "".join(lines).encode("utf-8", "surrogatepass")


@st.composite
def byte_mutation(draw: st.DrawFn) -> bytes:
    """Bytes: another encoding, random bytes spliced in, or a truncated file."""
    kind = draw(st.sampled_from(["codec", "splice", "truncate"]))
    raw = DEFAULT.encode()
    if kind == "codec":
        codec = draw(st.sampled_from(CODECS))
        return DEFAULT.encode(codecs.lookup(codec).name, "replace")
    at = draw(st.integers(0, len(raw)))
    if kind == "splice":
        return raw[:at] + draw(st.binary(min_size=1, max_size=16)) + raw[at + draw(st.integers(0, 16)):]
    return raw[:at]


MATRIX_FILES = st.one_of(data_mutation(), text_mutation(), byte_mutation())


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return make_workspace(tmp_path_factory.mktemp("fuzz-matrix"))


def test_any_matrix_file_is_a_matrix_or_a_config_error(ws: Workspace) -> None:
    outcomes: Counter[str] = Counter()
    path = ws.root / "fuzzed.yaml"

    @FUZZ.__class__(FUZZ, max_examples=EXAMPLES)
    @given(MATRIX_FILES, st.sampled_from([["--all"], ["--json"], []]))
    def one(data: bytes, extra: list[str]) -> None:
        path.write_bytes(data)
        outcome = run(matrix_command, ["--matrix", str(path), *extra], ws)
        outcomes[outcome] += 1
        assert outcome in ("ok", "error"), outcome
        if outcome == "ok":  # what was accepted names cells that are safe folder names
            from buildscripts import matrix
            for cell in matrix.load(path, {}).cells:
                checked_name(cell.id, "cell id")

    with confined(ws.root):
        one()
    assert sum(outcomes.values()) >= EXAMPLES
    assert outcomes["error"] > EXAMPLES // 4, outcomes  # the mutations do reach the error paths
    assert outcomes["ok"] > 0, outcomes                 # and some stay valid matrices


def test_the_workspace_matrix_still_loads(ws: Workspace) -> None:
    assert run(matrix_command, ["--matrix", str(Path(ws.matrix))], ws) == "ok"
