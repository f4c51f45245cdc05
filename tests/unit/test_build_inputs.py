"""Build inputs: mirror discovery, secrets, candidate hashes and buildx progress parsing (no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildscripts import hostenv, matrix
from buildscripts.build import base
from buildscripts.build import buildx as build
from buildscripts.errors import ConfigError
from buildscripts.lock import LockPaths
from buildscripts.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]

PROGRESS = """\
#6 [pyenv 1/2] COPY lockfiles/bootstrap.txt /opt/locks/bootstrap.txt
#6 CACHED
#9 [torch 2/2] RUN uv pip install --require-hashes --no-deps -r /opt/locks/lane.txt
#9 DONE 47.7s
#11 [sglang 2/2] RUN uv pip install --require-hashes --no-deps -r /opt/locks/sglang.txt
#11 DONE 42.8s
#18 exporting to image
#18 DONE 51.5s
"""


def test_layer_times_per_stage(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text(PROGRESS)
    assert build.layer_times(log) == {"pyenv": 0.0, "torch": 47.7, "sglang": 42.8, "export": 51.5}


def test_last_error_prefers_error_lines() -> None:
    out = "#9 0.1 ok\nERROR: failed to solve: process did not complete\n#9 more\n"
    assert build.last_error(out).startswith("ERROR: failed to solve")


def test_host_mirror_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "a.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.invalid/debian/\nSuites: bookworm\n")
    assert base.host_mirror((tmp_path,)) == "http://mirror.invalid/debian"
    one = tmp_path / "sources.list"
    one.write_text("deb [arch=amd64] http://other.invalid/debian bookworm main\n")
    assert base.host_mirror((one,)) == "http://other.invalid/debian"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no Debian mirror"):
        base.host_mirror((empty,))


def test_index_settings_keep_only_network_indexes() -> None:
    env = {"PIP_INDEX_URL": "https://pypi.example.invalid/simple",
           "PIP_EXTRA_INDEX_URL": "file:///opt/local https://extra.invalid/simple"}
    settings = hostenv.index_settings(env)
    assert settings.index_url == "https://pypi.example.invalid/simple"
    assert settings.extra_index_urls == ("https://extra.invalid/simple",)
    assert settings.uv_env()["UV_DEFAULT_INDEX"] == "https://pypi.example.invalid/simple"


def test_secrets_are_passed_as_files_not_values(tmp_path: Path) -> None:
    env = {"PIP_INDEX_URL": "https://user:s3cret@private.invalid/simple"}
    with build.build_secrets(env) as flags:
        joined = " ".join(flags)
        assert "s3cret" not in joined
        index_file = Path(flags[3].split("src=")[1])
        assert "s3cret" in index_file.read_text()
    assert not index_file.exists()


def test_candidate_hash_follows_lock_content(tmp_path: Path) -> None:
    cell = next(c for c in matrix.load(ROOT / "matrix.yaml", {}).buildable() if c.toolkit.cuda_home)
    image = base.BaseImage("sglang-images/base:x", "sha256:abc", "x", built=False)
    lane, sgl = tmp_path / "lane.txt", tmp_path / "sglang.txt"
    lane.write_text("torch==2.11.0\n")
    sgl.write_text("sglang==0.5.16\n")
    locks = LockPaths(lane=lane, sglang=sgl, toolkit=None)
    recipe = build.Recipe.of(Workspace.at())
    first = build.inputs_hash(cell, image, locks, recipe)
    assert first == build.inputs_hash(cell, image, locks, recipe)
    sgl.write_text("sglang==0.5.16\nextra==1\n")
    assert build.inputs_hash(cell, image, locks, recipe) != first


def test_every_debootstrapped_base_carries_libnuma_and_a_base_built_without_it_is_not_reused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl_kernel's common_ops (SGLang 0.5.10's 0.3.x) links libnuma.so.1: the runtime library is in every base,
    and the base's inputs hash covers its package list, so a base debootstrapped before it is built again."""
    bases = matrix.load(ROOT / "matrix.yaml", {}).spec.bases
    debootstrapped = {name: b for name, b in bases.items() if b.debootstrap is not None}
    assert debootstrapped and "libnuma1" in base.BASE_PACKAGES
    assert not any(p.startswith("libnuma-dev") or p == "numactl" for p in base.BASE_PACKAGES)   # the library alone
    name, one = next(iter(debootstrapped.items()))
    now = base.inputs_hash(name, one, "http://deb.example/debian")
    monkeypatch.setattr(base, "BASE_PACKAGES", tuple(p for p in base.BASE_PACKAGES if p != "libnuma1"))
    assert base.inputs_hash(name, one, "http://deb.example/debian") != now
