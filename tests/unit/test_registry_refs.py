"""Registry references and messages: parsing, validation, and no credential in any message."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts.commands import promote as promote_command
from buildscripts.errors import ConfigError, RegistryError
from buildscripts.registry import failures, through_engine
from tests.commands import call

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("ref", "expected"), [
    ("127.0.0.1:5000/sglang-images:0.5.16-pip", ("127.0.0.1:5000/sglang-images", "0.5.16-pip")),
    ("127.0.0.1:5000/sglang-images", ("127.0.0.1:5000/sglang-images", "latest")),
    ("sglang-images:tag", ("sglang-images", "tag")),
])
def test_split_ref(ref: str, expected: tuple[str, str]) -> None:
    assert through_engine.split_ref(ref) == expected


@pytest.mark.parametrize("url", ["https://ghcr.io/org", "user:secret@ghcr.io", "ghcr.io/Org Name", ""])
def test_bad_registry_urls_are_refused(url: str) -> None:
    with pytest.raises(RegistryError, match="HOST"):
        through_engine.check_url(url)


def test_good_registry_urls_pass() -> None:
    assert through_engine.check_url("127.0.0.1:5000/") == "127.0.0.1:5000"
    assert through_engine.check_url("ghcr.io/my-org") == "ghcr.io/my-org"


def test_engine_messages_lose_anything_like_credentials() -> None:
    engine_says = 'Get "https://bob:hunter2@reg.example/v2/": auth=abc123 denied'
    err = failures.failure(failures.PUSH, "r/x:y", engine_says)
    assert "hunter2" not in str(err) and "abc123" not in str(err)
    assert "docker login" in str(err)


def test_promote_without_a_registry_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no registry to promote to"):
        call(promote_command, ["--matrix", str(ROOT / "matrix.yaml"), "--results", str(tmp_path / "none.json")])
