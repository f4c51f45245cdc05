"""The one exit point (buildscripts/cli.py): a docker SDK error from any command becomes the EngineError message
and exit code, although the CLI itself no longer imports the SDK; any other exception is not taken for one."""

from __future__ import annotations

import docker.errors
import pytest

from buildscripts import cli
from buildscripts.commands import matrix as matrix_command
from buildscripts.errors import EngineError


def raising(exc: Exception) -> object:
    def run(options: object) -> int:
        raise exc
    return run


def test_a_docker_sdk_error_is_an_engine_error(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(matrix_command, "run", raising(docker.errors.NotFound("no such image: sglang-images:x")))
    assert cli.main(["matrix"], {}) == EngineError.exit_code
    err = capsys.readouterr().err
    assert "the Docker engine failed a request: no such image: sglang-images:x" in err
    assert "Traceback" not in err


def test_another_exception_is_left_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix_command, "run", raising(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["matrix"], {})
