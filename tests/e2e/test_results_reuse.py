"""Results reuse on the real cells: a second `build` with nothing changed starts no container and reuses the
saved stages; a changed stage list or `--reverify` verifies again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import docker

from buildscripts.results import RunResults, Verdict
from buildscripts.verify.container import LABEL_CELL

ROOT = Path(__file__).resolve().parents[2]
CELLS = "sglang0.5.16-torch2.11.0-cu130-*"     # the cells the session's `run` fixture built (e2e/conftest.py)
PIP_CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


def build(runs: Path, run_id: str, *args: str) -> tuple[RunResults, int]:
    """`build` again on the session's images: (its results, verification containers it created)."""
    client = docker.from_env()
    since = int(time.time()) - 1
    done = subprocess.run([sys.executable, "-m", "buildscripts", "build", "--runs", str(runs), "--run-id", run_id,
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    print(done.stdout[-4000:], done.stderr[-2000:])
    assert done.returncode == 0, done.stderr[-2000:]
    events = client.events(since=since, until=int(time.time()) + 1, decode=True,
                           filters={"type": "container", "event": "create", "label": LABEL_CELL})
    created = sum(1 for _ in events)
    results = RunResults.model_validate(json.loads((runs / run_id / "results.json").read_text()))
    return results, created


def test_nothing_changed_nothing_is_verified_again(run: RunResults, runs: Path) -> None:
    again, created = build(runs, "again", "--only", CELLS)
    assert created == 0
    built = [c for c in run.cells if c.image.id]
    assert built, "the session's run built no image"
    for first in built:
        second = again.cell(first.cell_id)
        assert second is not None
        assert second.build is not None and second.build.cached
        assert second.reused_from is not None and second.reused_from.startswith("run e2e of ")
        assert second.verification_key == first.verification_key
        assert second.verdict is first.verdict
        assert [(s.name, s.status) for s in second.stages] == [(s.name, s.status) for s in first.stages]
        assert {s.run_id for s in second.stages} == {"e2e"}   # each reused stage says where it really ran


def test_a_changed_stage_list_or_reverify_verifies_again(run: RunResults, runs: Path) -> None:
    assert run.cell(PIP_CELL) is not None
    fewer, created = build(runs, "fewer-stages", "--only", PIP_CELL, "--stages", "facts,import")
    assert created == 1
    cell = fewer.cell(PIP_CELL)
    assert cell is not None and cell.reused_from is None
    assert [s.name for s in cell.stages] == ["facts", "import"]
    assert cell.verdict is Verdict.BUILT   # not every CPU stage ran: nothing can be claimed
    forced, created = build(runs, "forced", "--only", PIP_CELL, "--reverify")
    assert created == 1
    cell = forced.cell(PIP_CELL)
    assert cell is not None and cell.reused_from is None
    assert cell.verdict is run.cell(PIP_CELL).verdict  # type: ignore[union-attr]
