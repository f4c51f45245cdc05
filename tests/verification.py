"""A verification request as the tests make one (what provisioning makes of a command's options): a plan, the
GPUs and docker options a container gets, and where its log goes (LOGS/probe.log)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from buildscripts.results import ImageInfo
from buildscripts.verify.gpus import Discovery, Handed
from buildscripts.verify.plan import Plan
from buildscripts.verify.request import Provision, VerificationRequest


def request(plan: Plan, logs: Path, *, cell_id: str = "adhoc", run_id: str = "manual",
            options: Mapping[str, Any] | None = None, handed: Handed | None = None, cut_problem: str | None = None,
            keep: bool = False, facts: ImageInfo | None = None,
            discovery: Discovery | None = None) -> VerificationRequest:
    given = Provision(discovery=discovery or Discovery(), options=dict(options or {}), handed=handed or Handed(),
                      cut_problem=cut_problem)
    return VerificationRequest(plan=plan, provision=given, cell_id=cell_id, logs=logs, run_id=run_id, keep=keep,
                               facts=facts)
