"""The house's size limits: no module over 400 lines and no function over 60 lines in buildscripts/ and images/.

Small modules with one job, and functions short enough to read at once, are how the project stays reviewable;
this test names every place that has outgrown them, so a split happens when the code grows, not in a later
clean-up round.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("buildscripts", "images")
MODULE_LINES = 400
FUNCTION_LINES = 60


def python_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def too_long(path: Path, root: Path = ROOT) -> list[str]:
    """What in one file breaks a limit: the module by its line count, a function (methods and nested ones too)
    from its `def` line to its last line."""
    text = path.read_text()
    rel = path.relative_to(root)
    found = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES:
        found.append(f"{rel}: {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(ast.parse(text, filename=str(rel))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES:
                found.append(f"{rel}:{node.lineno} {node.name}: {length} lines (at most {FUNCTION_LINES})")
    return found


def test_the_walk_finds_the_code_it_guards() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in python_files()}
    assert {"buildscripts/probe/cpu_stages.py", "images/lean/prune_fatbins.py", "images/bytecode.py"} <= found


def test_the_measure_counts_what_it_should(tmp_path: Path) -> None:
    """A function of 61 lines and a module of 401 are each named; 60 and 400 pass."""
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    short, long_ = f"def fits():\n{body}\n", f"def grown():\n{body}\n    x = 0\n"
    (tmp_path / "ok.py").write_text(short + "\n" * (MODULE_LINES - 60))
    (tmp_path / "big.py").write_text(long_ + "\n" * (MODULE_LINES - 60))
    assert too_long(tmp_path / "ok.py", tmp_path) == []
    assert too_long(tmp_path / "big.py", tmp_path) == ["big.py: 401 lines (at most 400)",
                                                      "big.py:1 grown: 61 lines (at most 60)"]


def test_no_module_or_function_outgrows_the_house_limits() -> None:
    found = [problem for path in python_files() for problem in too_long(path)]
    assert not found, "split these by job (docs/contributing.md, Design goals):\n" + "\n".join(found)
