"""The package's release workflow (.github/workflows/release.yml), read as GitHub would: it runs on a version tag
only; the job that builds holds no publishing right, and the one that publishes builds nothing, holds the only
OIDC token (`id-token: write`) in a protected environment, and uploads with PEP 740 attestations; the actions are
pinned by major version as the CI workflow pins them. actionlint reads it too (tests/process/test_workflow_lint.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / ".github" / "workflows" / "release.yml").read_text()
SPEC: dict[Any, Any] = yaml.safe_load(TEXT)
JOBS: dict[str, dict[str, Any]] = SPEC["jobs"]
PUBLISH_ACTION = "pypa/gh-action-pypi-publish@release/v1"   # the publisher's own major-version ref


def test_only_a_version_tag_releases() -> None:
    triggers = SPEC[True]   # YAML 1.1 reads the key `on` as True
    assert triggers == {"push": {"tags": ["v*"]}}
    assert SPEC["permissions"] == {"contents": "read"}


def test_the_build_job_builds_and_checks_and_cannot_publish() -> None:
    dist = JOBS["dist"]
    assert "permissions" not in dist and "environment" not in dist   # the workflow's read-only token alone
    runs = "\n".join(step.get("run", "") for step in dist["steps"])
    assert "python -m build\n" in runs and "twine check --strict dist/*" in runs
    assert 'if [ "$TAG" != "v$version" ]' in runs   # a tag that does not name pyproject's version stops here
    (upload,) = [s for s in dist["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == "dist/" and upload["with"]["if-no-files-found"] == "error"


def test_the_publish_job_alone_holds_the_token_and_publishes_what_was_checked() -> None:
    publish = JOBS["publish"]
    assert publish["needs"] == "dist"
    assert publish["permissions"] == {"id-token": "write"} and publish["environment"]["name"] == "pypi"
    assert [j for j, job in JOBS.items() if "id-token" in job.get("permissions", {})] == ["publish"]
    uses = [s.get("uses", "") for s in publish["steps"]]
    assert uses == ["actions/download-artifact@v7", PUBLISH_ACTION]   # no checkout, no build: the artifact only
    assert not any("run" in s for s in publish["steps"])
    assert publish["steps"][-1]["with"] == {"attestations": True}


def test_actions_are_pinned_as_the_ci_workflow_pins_them() -> None:
    pinned = re.findall(r"uses: (\S+)", TEXT)
    assert pinned and all(re.fullmatch(r"actions/[\w-]+@v\d+", u) or u == PUBLISH_ACTION for u in pinned)
