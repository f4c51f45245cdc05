"""The lockfile format: header with inputs, body from uv, content hash that catches hand edits."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts.errors import LockError
from buildscripts.lock import lockfile

BODY = """\
six==1.17.0 \\
    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274 \\
    --hash=sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81
    # via -r requirements.in
Typing_Extensions==4.16.0 \\
    --hash=sha256:0000000000000000000000000000000000000000000000000000000000000001
    # via -r requirements.in
"""


def make() -> lockfile.Lockfile:
    return lockfile.Lockfile(header={"layer": "lane x", "inputs-sha256": "abc"}, body=BODY)


def test_render_parse_round_trip_and_is_deterministic() -> None:
    text = make().render()
    assert text == make().render()
    parsed = lockfile.parse(text)
    assert parsed.body == BODY
    assert parsed.header["layer"] == "lane x"
    assert parsed.header["content-sha256"] == lockfile.sha256(BODY)
    assert not parsed.edited_by_hand()
    assert "Do not edit by hand" in text


def test_pins_are_normalised_with_sorted_hashes() -> None:
    pins = make().pins
    assert set(pins) == {"six", "typing-extensions"}
    assert pins["six"].version == "1.17.0"
    assert len(pins["six"].hashes) == 2
    assert pins["typing-extensions"].hashes == ("sha256:" + "0" * 63 + "1",)


def test_a_changed_hash_is_an_edit_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "lock.txt"
    lockfile.write(path, make())
    assert lockfile.verify(path).body == BODY
    path.write_text(path.read_text().replace("4721f391", "4721f392"))
    with pytest.raises(LockError, match="edited by hand"):
        lockfile.verify(path)


def test_a_file_without_our_header_is_refused() -> None:
    with pytest.raises(LockError, match="not a lockfile written by `nox -s lock`"):
        lockfile.parse(BODY, "x.txt")


def test_inputs_hash_ignores_key_order() -> None:
    assert lockfile.inputs_hash({"a": 1, "b": [2]}) == lockfile.inputs_hash({"b": [2], "a": 1})
    assert lockfile.inputs_hash({"a": 1}) != lockfile.inputs_hash({"a": 2})
