"""Every skip in tests/ goes through tests/needs.py's rule (a FAILURE under CI=true, a skip elsewhere), or is on
the short list below, each with why CI may take it. A new `pytest.skip`, `skipif`, `importorskip` or `xfail`
outside the rule fails here, so that a green CI cannot hide work it did not do."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
RULE = TESTS / "needs.py"
SKIPS = {"skip", "skipif", "importorskip", "xfail"}

# file -> why CI may skip there (each file says it again at the skip, in a comment starting "CI may skip").
ALLOWED = {
    "process/test_probe_without_gpu.py": "it is about a machine without a GPU; on a GPU runner tests/gpu runs instead",
    "gpu/test_gpu_ladder.py": "the GPU tier needs a GPU and SGLang in this Python; CI's CPU runners have neither",
    "gpu/test_gpu_container.py": "the GPU tier needs an engine handing GPUs to containers; CI's CPU runners have none",
}


def skips(path: Path) -> list[int]:
    """Lines of `pytest.<skip...>` (calls, markers, attributes) and `from pytest import <skip...>` in `path`."""
    found: list[int] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in SKIPS and _rooted_at_pytest(node.value):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest"):
            found += [node.lineno for alias in node.names if alias.name in SKIPS]
    return sorted(found)


def _rooted_at_pytest(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "pytest"


def test_every_skip_goes_through_the_rule_or_says_why_ci_may_take_it() -> None:
    outside = {path.relative_to(TESTS).as_posix(): lines for path in sorted(TESTS.rglob("*.py"))
               if path != RULE and (lines := skips(path))}
    unlisted = {name: lines for name, lines in outside.items() if name not in ALLOWED}
    assert not unlisted, (f"skips outside tests/needs.py's rule: {unlisted}; use needs.unavailable(WHAT, HINT) (a "
                          "failure under CI=true), or add the file to ALLOWED with why CI may skip it")
    assert sorted(ALLOWED) == sorted(outside), "ALLOWED names files that no longer skip: remove them"
    for name in ALLOWED:
        assert "# CI may skip" in (TESTS / name).read_text(encoding="utf-8"), f"{name}: say at the skip why CI may"


def test_the_scan_sees_each_spelling(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('import pytest\nfrom pytest import importorskip\n"pytest.skip(x) in a string is no skip"\n'
                      "@pytest.mark.skipif(True, reason='r')\ndef f() -> None:\n    pytest.skip('r')\n"
                      "    pytest.xfail('r')\n")
    assert skips(sample) == [2, 4, 6, 7]
