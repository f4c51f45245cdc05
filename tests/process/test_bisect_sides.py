"""`bisect` reading its sides with git and grouping with the lock step's resolver, both as real processes: the
cell's layer locks from git refs of this checkout, and a stand-in `uv` on PATH that refuses a new torch without its
new triton (the real resolver needs the package index: tests/integration)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.bisect_locks import entry, write_lock
from tests.cli import cli

CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"

# Refuses a torch and a triton of different generations, as a resolver refuses torch 2.12 with triton 3.5;
# otherwise writes the output file it was asked for, adding the libraries a frontend 1.32 needs when they lack.
FAKE_UV = """#!/bin/sh
case "$1" in --version) echo "uv 0.0.0"; exit 0;; esac
reqs=$(cat requirements.in)
case "$reqs" in
  *torch==2.12.0*triton==3.5.0*|*torch==2.11.0*triton==3.6.0*)
    echo "error: No solution found when resolving dependencies" >&2; exit 1;;
esac
cp requirements.in requirements.txt
case "$reqs" in
  *cutlass-libs*) ;;
  *frontend==1.32.0*) echo "cutlass-libs==4.8.1" >> requirements.txt;;
esac
"""


def test_both_sides_from_git_refs_of_lockfiles() -> None:
    done = cli("bisect", CELL, "--good", "HEAD", "--bad", "HEAD", "--dry-run", "--no-resolve")
    assert done.returncode == 0, done.stderr
    assert "good: HEAD:lockfiles/lanes/torch2.11.0-cu130-bookworm.txt, HEAD:lockfiles/sglang/" in done.stdout
    assert "toolkits/sglang0.5.16-torch2.11.0-cu130-pip-bookworm.txt" in done.stdout
    assert "nothing to bisect" in done.stdout


def test_a_ref_git_does_not_know_is_a_clear_error() -> None:
    done = cli("bisect", CELL, "--good", "no-such-ref-anywhere", "--bad", "HEAD", "--dry-run", "--no-resolve")
    assert done.returncode == 2
    assert "git cannot show no-such-ref-anywhere:lockfiles/lanes/" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_resolver_keeps_a_torch_with_its_triton(tmp_path: Path) -> None:
    good = write_lock(tmp_path / "good.txt", entry("torch", "2.11.0", "a"), entry("triton", "3.5.0", "a"),
                      entry("numpy", "2.3.0", "a"))
    bad = write_lock(tmp_path / "bad.txt", entry("torch", "2.12.0", "a"), entry("triton", "3.6.0", "a"),
                     entry("numpy", "2.3.4", "a"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(FAKE_UV)
    (bin_dir / "uv").chmod(0o755)
    done = cli("bisect", CELL, "--good", str(good), "--bad", str(bad), "--dry-run",
               env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert "2 group(s) (checked with `uv pip compile`" in done.stdout
    assert "  1. numpy 2.3.0 -> 2.3.4\n" in done.stdout
    assert "  2. torch 2.11.0 -> 2.12.0, triton 3.5.0 -> 3.6.0  (torch resolves only with triton)" in done.stdout


def test_a_removal_whose_dependant_stays_moves_with_it(tmp_path: Path) -> None:
    """uv adds what a set lacks; a step installs with --no-deps, so such a set is refused, not taken as resolved."""
    good = write_lock(tmp_path / "good.txt", entry("frontend", "1.32.0", "a"), entry("cutlass-libs", "4.8.1", "a"),
                      entry("tqdm", "4.70.1", "a"))
    bad = write_lock(tmp_path / "bad.txt", entry("frontend", "1.20.0", "a"), entry("tqdm", "4.67.1", "a"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(FAKE_UV)
    (bin_dir / "uv").chmod(0o755)
    done = cli("bisect", CELL, "--good", str(good), "--bad", str(bad), "--dry-run",
               env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert "2 group(s) (checked with `uv pip compile`" in done.stdout, done.stdout
    assert ("  1. cutlass-libs 4.8.1, frontend 1.32.0 -> 1.20.0  (cutlass-libs resolves only with frontend)"
            in done.stdout)
    assert "  2. tqdm 4.70.1 -> 4.67.1\n" in done.stdout
