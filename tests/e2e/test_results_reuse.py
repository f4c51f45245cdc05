"""Results reuse on a real cell: a second `build` with nothing changed starts no container and reuses the
saved stages; a changed stage list or `--reverify` verifies again.

The first build is this module's own, in a runs folder of its own, sealed by this test process's key (the main
job's records, which the rest of the tier reads, carry another verifier's seal, which a test build does not
trust): it verifies the seed-incident cell, as `nox -s build` does. That cell's ladder runs every CPU stage (its
import and the stages after fail as expected) in seconds; reuse decides by the verification key and a settled
verdict, the same for any cell, and the pip cell's whole ladder (the JIT compiles) would cost minutes of the
suite's two cores each time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from buildscripts.results import RunResults, Verdict
from buildscripts.verify.container import LABEL_CELL, LABEL_RUN

ROOT = Path(__file__).resolve().parents[2]
NONE_CELL = "sglang0.5.16-torch2.11.0-cu130-none-bookworm"   # one of the e2e tier's cells (e2e/conftest.py)


def build(runs: Path, run_id: str, *args: str) -> tuple[RunResults, int]:
    """`build` on the tier's images: (its results, the verification containers it created)."""
    client = docker.from_env()
    since = int(time.time()) - 1
    done = subprocess.run([sys.executable, "-m", "buildscripts", "build", "--runs", str(runs), "--run-id", run_id,
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    print(done.stdout[-4000:], done.stderr[-2000:])
    assert done.returncode == 0, done.stderr[-2000:]
    events = client.events(since=since, until=int(time.time()) + 1, decode=True,
                           filters={"type": "container", "event": "create",
                                    "label": [LABEL_CELL, f"{LABEL_RUN}={run_id}"]})   # not other tests' beside it
    created = sum(1 for _ in events)
    results = RunResults.model_validate(json.loads((runs / run_id / "results.json").read_text()))
    return results, created


@pytest.fixture(scope="module")
def first(run: RunResults, runs: Path) -> RunResults:
    """The cell built (the tier's `run` made sure its image exists: nothing is built again) and verified in
    `runs`, as run e2e."""
    done, created = build(runs, "e2e", "--only", NONE_CELL)
    assert created == 1 and all(c.reused_from is None for c in done.cells), created
    return done


def test_nothing_changed_nothing_is_verified_again(first: RunResults, runs: Path) -> None:
    again, created = build(runs, "again", "--only", NONE_CELL)
    assert created == 0
    built = [c for c in first.cells if c.image.id]
    assert len(built) == 1, "the first run built no image"
    for one in built:
        second = again.cell(one.cell_id)
        assert second is not None
        assert second.build is not None and second.build.cached
        assert second.reused_from is not None and second.reused_from.startswith("run e2e of ")
        assert second.verification_key == one.verification_key
        assert second.verdict is one.verdict
        assert [(s.name, s.status) for s in second.stages] == [(s.name, s.status) for s in one.stages]
        assert {s.run_id for s in second.stages} == {"e2e"}   # each reused stage says where it really ran


def test_a_changed_stage_list_or_reverify_verifies_again(first: RunResults, runs: Path) -> None:
    assert first.cell(NONE_CELL) is not None
    fewer, created = build(runs, "fewer-stages", "--only", NONE_CELL, "--stages", "facts,arch-audit")
    assert created == 1
    cell = fewer.cell(NONE_CELL)
    assert cell is not None and cell.reused_from is None
    assert [s.name for s in cell.stages] == ["facts", "arch-audit"]
    assert cell.verdict is Verdict.BUILT   # not every CPU stage ran: nothing can be claimed
    forced, created = build(runs, "forced", "--only", NONE_CELL, "--reverify")
    assert created == 1
    cell = forced.cell(NONE_CELL)
    assert cell is not None and cell.reused_from is None
    assert cell.verdict is first.cell(NONE_CELL).verdict  # type: ignore[union-attr]
