"""`verify --here`: today's modes chosen from what `here` reads of this machine (recorded machines,
tests/unit/data/machines): IMAGE in a container where Docker hands GPUs to containers, else this machine's python3
in place; a machine that cannot run the asked mode is told what fixes it, before anything runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from buildscripts.commands import verify
from buildscripts.errors import ConfigError
from buildscripts.here import facts
from tests.recorded_machines import recorded


def asked(*argv: str) -> argparse.Namespace:
    return verify._parser().parse_args(["--here", *argv])


@pytest.fixture
def python_on_path(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "python3").write_text("#!/bin/sh\n")
    (tmp_path / "python3").chmod(0o755)
    return {"PATH": str(tmp_path)}


def on(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(facts, "live", lambda env: recorded(name))


def test_inside_an_unprivileged_ct_without_image_it_is_this_python_in_place(
        monkeypatch: pytest.MonkeyPatch, python_on_path: dict[str, str]) -> None:
    on(monkeypatch, "rtx-pro-6000-ct")
    chosen = verify._here(asked(), python_on_path)
    assert chosen.host and not chosen.here and chosen.image is None
    assert chosen.python == str(Path(python_on_path["PATH"]) / "python3")


def test_a_python_given_is_kept(monkeypatch: pytest.MonkeyPatch, python_on_path: dict[str, str]) -> None:
    on(monkeypatch, "h200-host")
    chosen = verify._here(asked("--python", "/opt/venv/bin/python3"), python_on_path)
    assert chosen.host and chosen.python == "/opt/venv/bin/python3"


def test_an_image_on_a_docker_host_with_the_nvidia_runtime_runs_in_a_container(
        monkeypatch: pytest.MonkeyPatch, python_on_path: dict[str, str]) -> None:
    on(monkeypatch, "b200-host")
    chosen = verify._here(asked("registry.example/sglang-images@sha256:" + "a" * 64), python_on_path)
    assert not chosen.host and not chosen.here and chosen.image.startswith("registry.example/")


def test_an_image_where_docker_hands_no_gpu_is_refused_with_its_fix(
        monkeypatch: pytest.MonkeyPatch, python_on_path: dict[str, str]) -> None:
    on(monkeypatch, "rtx-pro-6000-ct")   # inside a CT: no docker program there
    with pytest.raises(ConfigError) as raised:
        verify._here(asked("sglang-images:tag"), python_on_path)
    assert "verify --here sglang-images:tag" in raised.value.message and raised.value.hint


def test_no_python3_anywhere_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    on(monkeypatch, "rtx-pro-6000-ct")
    with pytest.raises(ConfigError) as raised:
        verify._here(asked(), {"PATH": str(tmp_path)})
    assert "no python3" in raised.value.message and "--python" in (raised.value.hint or "")


def test_here_goes_with_no_other_place() -> None:
    with pytest.raises(SystemExit):
        verify._parser().parse_args(["--here", "--host"])
