"""The lean recipe as the image runs it: `sh images/lean/lean.sh FLAVOUR RECIPE` on a folder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lean_applies_flavour_lines_to_that_flavour_only(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.txt"
    recipe.write_text("cu130: dsl/cu12  # CUDA 12 libraries in a CUDA 13 cell\nlib/*.a  # static archives\n")
    for flavour, kept in (("cu130", False), ("cu128", True)):
        site = tmp_path / flavour
        (site / "dsl" / "cu12").mkdir(parents=True)
        (site / "lib").mkdir()
        (site / "lib" / "x.a").write_bytes(b"0" * 2048)
        (site / "lib" / "x.so").write_bytes(b"0")
        done = subprocess.run(["sh", str(ROOT / "images" / "lean" / "lean.sh"), flavour, str(recipe)],
                              env={**os.environ, "LEAN_SITE": str(site)}, capture_output=True, text=True,
                              check=True)
        assert (site / "dsl" / "cu12").exists() is kept
        assert not (site / "lib" / "x.a").exists() and (site / "lib" / "x.so").exists()
        assert "lean: removed lib/x.a" in done.stdout
