"""`python -m buildscripts report` and `matrix` as processes (issue 27): killed with SIGKILL at any moment, a
report leaves the old set or the new one in --out, never a mix; two reports into one --out at once leave one
whole set; a listing whose reader went away (`matrix | head -1`) ends normally."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from buildscripts import results
from buildscripts.results import RunResults
from tests.results_factory import make_cell
from tests.unit.fuzzing import examples

ROOT = Path(__file__).resolve().parents[2]
SET = {"results.json", "results.schema.json", "compat.md", "compat.html", "junit.xml", "sizes.md"}


def big_run(run_id: str, copies: int = 20) -> RunResults:
    """Enough cells that rendering takes a while (60: a tenth of a second) and a kill lands in it too, not only
    in the writes the slow disk stretches; more only makes every report process cost more."""
    cells = [make_cell(kind).model_copy(update={"cell_id": f"{kind}-{i}"}) for i in range(copies)
             for kind in ("verified", "failed", "cpu-checked")]
    return RunResults(run_id=run_id, started="2025-01-01T00:00:00+00:00", finished="2025-01-01T00:00:00+00:00",
                      cells=cells)


def report(results_file: Path, out: Path, *, slow: bool = False) -> subprocess.Popen[bytes]:
    """`report` of one results file into `out`; `slow`: on a slow disk (slow_disk.py), so kills land mid-write."""
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    start = [str(Path(__file__).with_name("slow_disk.py"))] if slow else ["-m", "buildscripts"]
    return subprocess.Popen([sys.executable, *start, "report", "--results", str(results_file),
                             "--out", str(out), "--no-readme"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def set_id(out: Path) -> str:
    """The run id of the set in `out`; fails unless every file is there and all name the same run."""
    assert {p.name for p in out.iterdir()} == SET
    ids = {json.loads((out / "results.json").read_text())["run_id"],
           ET.parse(out / "junit.xml").getroot().get("name", "").split()[-1]}
    ids |= {run for run in ("old", "new") if f"results of {run} " in (out / "compat.md").read_text()}
    ids |= {run for run in ("old", "new") if f"compatibility: {run}</title>" in (out / "compat.html").read_text()}
    assert len(ids) == 1, ids
    return str(ids.pop())


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for run_id in ("old", "new"):
        made[run_id] = tmp_path / f"{run_id}.json"
        results.save(big_run(run_id), made[run_id])
    return made


def test_sigkill_at_any_moment_leaves_one_whole_set(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "reports"
    first = report(files["old"], out, slow=True)
    started = time.monotonic()
    assert first.wait(120) == 0
    whole = time.monotonic() - started
    rng = random.Random(27)
    seen = set()
    for round_ in range(examples(10, least=4)):
        writer = report(files["new" if round_ % 2 == 0 else "old"], out, slow=True)
        time.sleep(rng.uniform(whole * 0.4, whole))  # past the imports, into rendering, writing or the swap
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(30)
        seen.add(set_id(out))
    assert seen <= {"old", "new"}


def test_two_reports_into_one_folder_leave_one_whole_set(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "reports"
    for _ in range(examples(6, least=3)):
        writers = [report(files["old"], out), report(files["new"], out)]
        for writer in writers:
            assert writer.wait(120) == 0
        assert set_id(out) in {"old", "new"}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "old.json", "reports"]  # nothing left


@pytest.mark.parametrize("args", [["matrix"], ["matrix", "--json"], ["matrix", "--all"]])
def test_a_listing_to_a_closed_pipe_ends_normally(args: list[str]) -> None:
    for _ in range(3):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first line: every write meets EPIPE
        done = subprocess.run([sys.executable, "-m", "buildscripts", *args], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        os.close(write)
        assert done.returncode == 0 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, \
            done.stderr


def test_a_listing_read_to_its_first_line_ends_normally() -> None:
    """`matrix --json | head -1`: the reader takes one line and goes."""
    with subprocess.Popen([sys.executable, "-m", "buildscripts", "matrix", "--json"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as listing:
        assert listing.stdout is not None and listing.stderr is not None
        assert listing.stdout.readline().strip() == "["
        listing.stdout.close()
        assert listing.wait(120) == 0
        assert "Traceback" not in listing.stderr.read()


@pytest.mark.parametrize("args", [["matrix", "--json"], ["report", "--no-readme"]])
def test_a_listing_and_a_report_start_without_the_docker_sdk(args: list[str], files: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """They never reach the engine, so they do not pay for importing its SDK (a tenth of a second a start)."""
    if args[0] == "report":
        args = [*args, "--results", str(files["old"]), "--out", str(tmp_path / "out")]
    code = ("import sys; from buildscripts import cli; code = cli.main(sys.argv[1:]); "
            "sys.exit(code or ('docker' in sys.modules and 'the docker SDK was imported'))")
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
