"""actionlint (from the `test` extra) finds nothing in the workflows (CI, the release watch, the package's
release); it also runs shellcheck over the `run:` scripts when shellcheck is on PATH. A planted mistake in each of
the two that build and publish shows that it does look."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import needs

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "sglang-images.yml"
RELEASE = ROOT / ".github" / "workflows" / "release.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def actionlint() -> str:
    # The test extra installs it beside this Python, which need not be on PATH.
    found = shutil.which("actionlint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                os.environ.get("PATH", "")]))
    if found is None:
        needs.unavailable("actionlint", "install the test extra: `pip install -e '.[test]'`")
    return found


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([actionlint(), "-no-color", "-oneline", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_the_workflows_have_no_actionlint_findings(workflow: Path) -> None:
    done = lint(workflow)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_actionlint_reports_an_expression_pasted_into_a_script(tmp_path: Path) -> None:
    text = WORKFLOW.read_text()
    line = 'nox -s verify -- --pull "$IMAGE" --run-id "$RUN_ID"'
    assert line in text
    planted = f'echo "${{{{ github.event.pull_request.title }}}}"\n          {line}'
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(text.replace(line, planted, 1))
    done = lint(bad)
    assert done.returncode == 1
    assert "github.event.pull_request.title" in done.stdout and "untrusted" in done.stdout


def test_actionlint_reports_a_mistake_planted_in_the_release_job(tmp_path: Path) -> None:
    """Two mistakes in the release workflow: a commit message (anyone's text) pasted into a script, and a step
    that names no action version."""
    text = RELEASE.read_text()
    line = "python -m build\n"
    action = "uses: pypa/gh-action-pypi-publish@release/v1"
    assert line in text and action in text
    planted = text.replace(line, f'echo "${{{{ github.event.head_commit.message }}}}"\n          {line}', 1)
    bad = tmp_path / ".github" / "workflows" / "release.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(planted.replace(action, "uses: pypa/gh-action-pypi-publish", 1))
    done = lint(bad)
    assert done.returncode == 1
    assert "github.event.head_commit.message" in done.stdout and "untrusted" in done.stdout
    assert "pypa/gh-action-pypi-publish" in done.stdout and "ref" in done.stdout
