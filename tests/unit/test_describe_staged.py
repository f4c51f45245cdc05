"""The build's step after staging (pipeline.describe_staged): what it asks attest/describe.py to make of the staged
image, taken from what the build knew (the cell, its locks, its base, the staged digest), and that a failure to
make them is said as a failed step of its own, never a crash of the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from buildscripts import log, pipeline
from buildscripts.attest import describe
from buildscripts.build.base import BaseImage
from buildscripts.errors import EngineError
from buildscripts.matrix import load
from buildscripts.pipeline_options import BuildOptions
from buildscripts.results import CellResult, ImageInfo
from buildscripts.trust import keys
from buildscripts.workspace import Workspace
from tests.attest_world import key_env
from tests.sbom_tree import PIP_CELL

ROOT = Path(__file__).resolve().parents[2]
DIGEST, PLATFORM = "sha256:" + "a" * 64, "sha256:" + "b" * 64


class Engine:
    def version(self) -> dict[str, str]:
        return {"Version": "20.10.24"}


def staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: Any) -> tuple[list[describe.Request], list[str]]:
    matrix = load(ROOT / "matrix.yaml")
    cell = matrix.cell(PIP_CELL)
    assert cell is not None
    key = keys.signing_key(key_env(tmp_path / "key"))
    base = BaseImage("sglang-images/base:bookworm-x", "sha256:" + "c" * 64, "506dba0836b592f5", built=False)
    ctx = pipeline.Context(client=cast(Any, Engine()), provision=cast(Any, None), bases={cell.base_name: base},
                           recipe=cast(Any, None), history=[], builder=cast(Any, None), cache=None, key=key,
                           trusted=[key.public], candidates={cell.id: ("2bb06196755a", "sglang-images:cand")})
    opts = BuildOptions(ws=Workspace.at(ROOT), matrix=matrix, run_id="r1", stage="registry.example/staging")
    record = CellResult(cell_id=cell.id, image=ImageInfo(id="sha256:" + "d" * 64, repository="registry.example/staging",
                                                         digest=DIGEST, platform_digest=PLATFORM))
    asked: list[describe.Request] = []
    steps: list[str] = []
    def make(_client: Any, request: describe.Request) -> list[Path]:
        asked.append(request)
        return cast(list[Path], made(request))

    monkeypatch.setattr(describe, "make", make)
    monkeypatch.setattr(log, "step", lambda cell_id, step, status, *a, **k: steps.append(f"{step} {status}"))
    pipeline.describe_staged(cell, matrix, ctx, opts, record, tmp_path / "run")
    return asked, steps


def test_the_staged_platform_manifest_is_described_with_what_the_build_knew(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    asked, steps = staged(tmp_path, monkeypatch, lambda request: [])
    (request,) = asked
    assert (request.subject.repository, request.subject.digest) == ("registry.example/staging", PLATFORM)
    assert request.image == "sha256:" + "d" * 64 and request.attach
    assert "g++" in request.subject.apt and any(p.startswith("cuda-toolkit") for p in request.subject.pip)
    facts = request.facts
    assert [shown for shown, _ in facts.locks] == [
        "lanes/torch2.11.0-cu130-bookworm.txt", "sglang/sglang0.5.16-torch2.11.0-cu130-bookworm.txt",
        f"toolkits/{PIP_CELL}.txt"]
    assert facts.base == {"suite": "bookworm", "variant": "minbase", "id": "sha256:" + "c" * 64,
                          "inputs": "506dba0836b592f5", "ref": "sglang-images/base:bookworm-x"}
    assert facts.engine == "20.10.24" and facts.parameters["inputs"] == "2bb06196755a"
    assert len(facts.definition_digest) == 64 and not facts.definition_digest.startswith("sha256:")
    assert steps == ["describe passed"]


def test_a_failure_to_describe_is_a_failed_step_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(request: describe.Request) -> list[Path]:
        msg = "reading the inventory failed"
        raise EngineError(msg, hint="")

    _, steps = staged(tmp_path, monkeypatch, fails)
    assert steps == ["describe failed"]
