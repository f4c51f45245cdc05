"""`python -m buildscripts matrix --github` as the workflow's setup job runs it: stdout is the job
matrix alone, on one line; a bad runner section is a clear error, a non-zero exit, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def test_stdout_is_one_json_line_of_jobs_and_nothing_else() -> None:
    done = cli("matrix", "--github", "--only", "*", env={"GITHUB_ACTIONS": "true"}, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    rows = json.loads(lines[0])["include"]
    assert rows and all(set(r) == {"cell", "arch", "runs-on", "platform", "machine", "name"} for r in rows)


def test_a_runner_arch_missing_from_archs_is_a_clean_error(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["runners"] = {"archs": {"sm_120": ["self-hosted", "gpu", "rtx-pro-6000"]}}
    bad = tmp_path / "matrix.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli("matrix", "--github", "--matrix", str(bad), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert "unknown arch 'sm_120' under runners.archs" in done.stderr
    assert "did you mean 'sm_120a'?" in done.stderr
