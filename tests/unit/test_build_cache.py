"""The shared build cache's decisions: which builder can export, which refs a cell imports and exports, and
what happens when the registry cannot be reached (the build goes on without it, and says so)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Sequence

import pytest

from buildscripts import matrix, pipeline, proc
from buildscripts.build import cache
from buildscripts.commands import build
from buildscripts.errors import ConfigError
from buildscripts.matrix.schema import Cache
from buildscripts.workspace import Workspace

CLASSIC = {"ServerVersion": "20.10.24", "DriverStatus": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]}
CONTAINERD = {"ServerVersion": "26.1.5", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}
INSPECT = "Name:          {name}\nDriver:        {driver}\nLast Activity: 2026-11-30\n\nNodes:\nName: x\n"


def fake_inspect(monkeypatch: pytest.MonkeyPatch, driver: str | None) -> list[Sequence[str]]:
    calls: list[Sequence[str]] = []

    def run(argv: Sequence[str], **_: object) -> proc.Completed:
        calls.append(argv)
        if driver is None:
            return proc.Completed(tuple(argv), 1, "ERROR: no builder \"nope\" found", 0.1)
        return proc.Completed(tuple(argv), 0, INSPECT.format(name="b", driver=driver), 0.1)

    monkeypatch.setattr(proc, "run", run)
    return calls


@pytest.mark.parametrize(("driver", "info", "exports"), [
    ("docker", CLASSIC, False), ("docker", CONTAINERD, True), ("docker-container", CLASSIC, True),
    ("remote", CLASSIC, True), ("kubernetes", CLASSIC, True),
])
def test_who_can_export_a_registry_cache(monkeypatch: pytest.MonkeyPatch, driver: str, info: dict[str, object],
                                         exports: bool) -> None:
    fake_inspect(monkeypatch, driver)
    found = cache.builder(None, info)
    assert (found.driver, found.exports_cache) == (driver, exports)
    assert (found.why_not is None) is exports
    if not exports:
        assert "20.10.24" in (found.why_not or "") and "containerd image store" in (found.why_not or "")


def test_a_named_builder_is_asked_for_and_non_docker_drivers_load_their_image(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_inspect(monkeypatch, "docker-container")
    found = cache.builder("ci-builder", CLASSIC)
    assert list(calls[0]) == ["docker", "buildx", "inspect", "ci-builder"]
    assert found.args() == ["--builder", "ci-builder", "--load"]
    fake_inspect(monkeypatch, "docker")
    assert cache.builder(None, CLASSIC).args() == []


def test_an_unknown_builder_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_inspect(monkeypatch, None)
    with pytest.raises(ConfigError, match="buildx builder nope cannot be used") as err:
        cache.builder("nope", CLASSIC)
    assert "docker buildx ls" in (err.value.hint or "")


def test_a_cell_imports_its_own_and_its_lane_neighbours_caches_and_exports_its_own() -> None:
    plan = cache.CachePlan(Cache(ref="registry.example.com/team/cache"), exports=True)
    args = plan.args("sglang0.5.16-cu130-pip", ["sglang0.5.16-cu130-none", "sglang0.5.16-cu130-pip"])
    assert args == [
        "--cache-from", "type=registry,ref=registry.example.com/team/cache:sglang0.5.16-cu130-pip",
        "--cache-from", "type=registry,ref=registry.example.com/team/cache:sglang0.5.16-cu130-none",
        "--cache-to", "type=registry,ref=registry.example.com/team/cache:sglang0.5.16-cu130-pip,"
                      "mode=max,compression=zstd,ignore-error=true",
    ]
    read_only = cache.CachePlan(Cache(ref="r.example.com/c", mode="min", export=False), exports=False)
    assert "--cache-to" not in read_only.args("a", ["b"])
    assert plan.base_ref("bookworm", "5a207be7") == "registry.example.com/team/cache:base-bookworm-5a207be7"


def test_cell_ids_become_valid_tags() -> None:
    assert cache.cache_tag("sglang0.5.16+local-torch2.11.0") == "sglang0.5.16_local-torch2.11.0"
    assert len(cache.cache_tag("x" * 300)) == 128


@pytest.mark.parametrize(("ref", "host"), [
    ("registry.example.com/a/cache", "registry.example.com"), ("127.0.0.1:5000/cache", "127.0.0.1:5000"),
    ("localhost/cache", "localhost"), ("team/cache", "registry-1.docker.io"), ("cache", "registry-1.docker.io"),
])
def test_the_registry_of_a_reference(ref: str, host: str) -> None:
    assert cache.registry_host(ref) == host


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])   # nothing listens once the socket is closed


def test_an_unreachable_cache_is_left_out_and_the_build_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    port = closed_port()
    builder = cache.Builder(None, "docker", exports_cache=True)
    plan, notes = cache.plan(Cache(ref=f"127.0.0.1:{port}/cache"), builder)
    assert plan is None
    assert len(notes) == 1 and f"127.0.0.1:{port}" in notes[0] and "building without the shared cache" in notes[0]


def test_a_builder_that_cannot_export_still_imports_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "unreachable", lambda ref: None)
    builder = cache.Builder(None, "docker", exports_cache=False, why_not="the classic image store cannot export")
    plan, notes = cache.plan(Cache(ref="registry.example.com/c"), builder)
    assert plan is not None and not plan.exports
    assert notes == ["build cache registry.example.com/c: importing only; the classic image store cannot export"]
    assert cache.plan(None, builder) == (None, [])


def shared_cache_for(argv: list[str], env: dict[str, str], cache_yaml: Cache | None) -> Cache | None:
    ws = Workspace.at()
    loaded = matrix.load(ws.matrix)
    changed = dataclasses.replace(loaded, spec=loaded.spec.model_copy(update={"cache": cache_yaml}))
    return pipeline.shared_cache(changed, build.parse(argv, ws, env))


def test_the_cache_comes_from_the_flag_else_the_environment_else_matrix_yaml() -> None:
    in_yaml = Cache(ref="yaml.example.com/cache", mode="min")
    assert shared_cache_for([], {}, in_yaml) == in_yaml
    assert shared_cache_for([], {}, None) is None
    from_env = shared_cache_for([], {"SGLANG_IMAGES_CACHE": "env.example.com/cache"}, in_yaml)
    assert from_env == Cache(ref="env.example.com/cache", mode="min")   # the ref replaced, the rest kept
    assert shared_cache_for([], {"SGLANG_IMAGES_CACHE": ""}, in_yaml) == in_yaml   # an unset CI variable
    assert shared_cache_for(["--cache-ref", "flag.example.com/c"], {"SGLANG_IMAGES_CACHE": "env.example.com/c"},
                            None) == Cache(ref="flag.example.com/c")
    assert shared_cache_for(["--cache-ref", ""], {}, in_yaml) is None   # turned off for this run


def test_a_bad_cache_ref_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="is not a registry repository reference"):
        shared_cache_for(["--cache-ref", "Bad Ref!"], {}, None)
