"""`here` as a wheel installed without the build system's own dependencies has it: with docker, numpy, safetensors
and testcontainers missing, the command imports, parses its command line and reads a machine (a child process, so
that what the test session imported does not count). The wheel itself, installed in a clean venv against a loopback
registry, is another test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from buildscripts.results import RunResults, store

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys
for name in ("docker", "numpy", "safetensors", "testcontainers"):
    sys.modules[name] = None          # an import of any of them now fails
from pathlib import Path
from buildscripts.commands import here
from buildscripts.here import facts, reading
from buildscripts.workspace import Workspace
options = here.parse(["--report", "results.json"], Workspace.at(), {})
found = reading.read(facts.Facts(Path("/nonexistent"), lambda argv: None))
print(options.report, found.gpu_problem.what if found.gpu_problem else "-")
"""


def test_here_runs_without_docker_numpy_safetensors_or_testcontainers() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["results.json", "gpu"]


def test_the_json_answer_and_the_exit_code_agree(tmp_path: Path) -> None:
    """On whatever machine runs the suite (no GPU: 20; a GPU: the answer for it): stdout is the JSON answer alone,
    its exit_code the process's, the words on stderr."""
    results = tmp_path / "results.json"
    store.save(RunResults(run_id="r", started="2026-12-01T10:00:00Z", cells=[]), results)
    done = subprocess.run([sys.executable, "-m", "buildscripts", "here", "--report", str(results), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    answer = json.loads(done.stdout)
    assert answer["exit_code"] == done.returncode != 0 and answer["source"] == str(results)
    assert answer["machine"]["platform"].startswith("linux/") and answer["noes"]
    assert answer["noes"][0]["said"] in done.stderr


def test_without_a_source_it_says_the_machine_and_asks_for_one() -> None:
    done = subprocess.run([sys.executable, "-m", "buildscripts", "here"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "this machine: linux/" in done.stdout and "--repository" in done.stderr
