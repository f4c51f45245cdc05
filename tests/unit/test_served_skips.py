"""Without a GPU the host keeps the first generation skipped, as the probe reported it (never aborted)."""

from __future__ import annotations

from buildscripts.results import StageResult, Status
from buildscripts.verify.served import generation_stage


def test_no_gpu_keeps_first_generation_skipped() -> None:
    skipped = StageResult(name="first-generation", status=Status.SKIPPED, reason="needs a GPU: no GPU visible",
                          where="container (cpu)")
    server = StageResult(name="server", status=Status.SKIPPED, reason="needs a GPU: no GPU visible")
    out = generation_stage(skipped, server, server, None, None)
    assert out.status is Status.SKIPPED and out.reason == skipped.reason


def test_a_failed_server_still_aborts_the_generation() -> None:
    skipped = StageResult(name="first-generation", status=Status.ABORTED, reason="prerequisite", where="container")
    server = StageResult(name="server", status=Status.FAILED, reason="died")
    out = generation_stage(skipped, server, server, None, None)
    assert out.status is Status.ABORTED and "server (failed)" in (out.reason or "")
