"""The host runner: the probe in a Python environment of this machine (a venv, a GPU test machine without
Docker), not in a container. Its output is read by the same parser as a container's."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from .. import proc
from ..results import StageResult
from ..trust.keys import KEY_ENV, KEY_FILE_ENV
from ..workspace import PROJECT_ROOT
from .output import from_process
from .plan import Plan


def verify_on_host(plan: Plan, *, log_file: Path, workdir: Path, env: Mapping[str, str],
                   python: str = sys.executable) -> list[StageResult]:
    """Run the plan with `python`; `env` is the environment the probe gets on top of this process's
    (its PYTHONPATH is kept after the project's, so a staged site folder stays importable), less the
    verifier's signing key: the environment under test never gets it."""
    path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    done = proc.run([python, "-m", "buildscripts.probe", *plan.probe_args("host"), "--workdir", str(workdir)],
                    log=log_file, timeout=len(plan.stages) * plan.deadline,
                    env={**env, KEY_ENV: "", KEY_FILE_ENV: "", "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"},
                    keep_lines=100000)
    return from_process(done, plan.stages, plan.stage_timeout, python=python)
