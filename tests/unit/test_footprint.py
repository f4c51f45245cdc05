"""The build's disk bound (buildscripts/build/footprint.py) against a fake engine: the size option,
superseded candidates (same cell, other inputs) and the advice a disk check gives."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from buildscripts.build import footprint
from buildscripts.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

CELL = "sglang0.5.16-torch2.11.0-cu130-pip-bookworm"


class FakeImage:
    def __init__(self, ident: str, cell: str, inputs: str, tags: list[str], size: int = 7 * 10**9) -> None:
        self.id, self.tags = ident, tags
        self.labels = {"io.sglang-images.cell": cell, "io.sglang-images.inputs": inputs}
        self.attrs = {"Size": size}


class FakeImages:
    def __init__(self, images: list[FakeImage]) -> None:
        self.images = images
        self.removed: list[str] = []

    def list(self, **kwargs: Any) -> list[FakeImage]:
        return self.images

    def remove(self, tag: str) -> None:
        self.removed.append(tag)


class FakeClient:
    def __init__(self, images: list[FakeImage]) -> None:
        self.images = FakeImages(images)

    def df(self) -> dict[str, Any]:
        return {"LayersSize": 30 * 10**9,
                "BuildCache": [{"Size": 5 * 10**9, "Shared": False}, {"Size": 9 * 10**9, "Shared": True}]}


def tag_of(cell: str, inputs: str) -> str:
    return f"sglang-images:{cell}-{inputs}"


def test_cache_keep_takes_sizes_and_none() -> None:
    assert footprint.cache_keep("20GB") == 20 * 10**9
    assert footprint.cache_keep("512 MiB") == 512 * 1024**2
    assert footprint.cache_keep("none") is None
    for bad in ("", "20", "-1GB", "lots", "1e3GB"):
        with pytest.raises(ConfigError, match="is not a size"):
            footprint.cache_keep(bad)


def test_only_candidates_of_other_inputs_of_the_built_cells_are_superseded() -> None:
    old = FakeImage("sha256:a", CELL, "aaaaaaaaaaaa", [tag_of(CELL, "aaaaaaaaaaaa")])
    kept_by_good_tag = FakeImage("sha256:b", CELL, "bbbbbbbbbbbb",
                                 [tag_of(CELL, "bbbbbbbbbbbb"), "sglang-images:0.5.16-torch2.11.0-cu130-pip"])
    current = FakeImage("sha256:c", CELL, "cccccccccccc", [tag_of(CELL, "cccccccccccc")])
    other_cell = FakeImage("sha256:d", "sglang0.5.23-x", "dddddddddddd", [tag_of("sglang0.5.23-x", "dddddddddddd")])
    renamed = FakeImage("sha256:e", CELL, "eeeeeeeeeeee", ["mine:latest"])   # not under its candidate tag
    client = FakeClient([old, kept_by_good_tag, current, other_cell, renamed])
    found = footprint.superseded(client, {CELL: "cccccccccccc"}, tag_of)  # type: ignore[arg-type]
    assert [tag for tag, _ in found] == [tag_of(CELL, "aaaaaaaaaaaa"), tag_of(CELL, "bbbbbbbbbbbb")]
    freed = footprint.remove_superseded(client, found)  # type: ignore[arg-type]
    assert client.images.removed == [tag_of(CELL, "aaaaaaaaaaaa"), tag_of(CELL, "bbbbbbbbbbbb")]
    assert freed == 7 * 10**9          # the image with a good tag stays: only its candidate tag went


def test_the_disk_advice_names_each_thing_to_prune_with_its_command(tmp_path: Path) -> None:
    old = FakeImage("sha256:a", CELL, "aaaaaaaaaaaa", [tag_of(CELL, "aaaaaaaaaaaa")])
    text = footprint.advice(FakeClient([old]), tmp_path, {CELL: "cccccccccccc"}, tag_of)  # type: ignore[arg-type]
    assert "this engine holds images 30.0 GB, BuildKit cache 5.0 GB" in text
    assert f"superseded candidates (~7.0 GB): docker rmi {tag_of(CELL, 'aaaaaaaaaaaa')}" in text
    assert "BuildKit cache (5.0 GB no image holds): docker buildx prune --force (the next" in text


def test_the_build_options_of_the_bound_refuse_bad_values_naming_where_they_came_from(tmp_path: Path) -> None:
    from buildscripts import pipeline_options
    from buildscripts.commands import build
    from buildscripts.workspace import Workspace

    ws = Workspace.at(tmp_path)
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    opts = build.parse([], ws, {})
    assert opts.cache_keep == 20 * 10**9 and opts.keep_superseded is False
    env = {pipeline_options.CACHE_KEEP_ENV: "none", pipeline_options.KEEP_SUPERSEDED_ENV: "1"}
    opts = build.parse([], ws, env)
    assert opts.cache_keep is None and opts.keep_superseded is True
    assert build.parse(["--cache-keep", "5GB", "--keep-superseded"], ws, {}).cache_keep == 5 * 10**9
    with pytest.raises(ConfigError, match=r"^--cache-keep 'lots' is not a size"):
        build.parse(["--cache-keep", "lots"], ws, {})
    with pytest.raises(ConfigError, match=r"^SGLANG_IMAGES_CACHE_KEEP='lots' is not a size"):
        build.parse([], ws, {pipeline_options.CACHE_KEEP_ENV: "lots"})
    with pytest.raises(ConfigError, match=r"^SGLANG_IMAGES_KEEP_SUPERSEDED='yes' is neither 0 nor 1"):
        build.parse([], ws, {pipeline_options.KEEP_SUPERSEDED_ENV: "yes"})


def test_only_images_of_the_same_owner_are_superseded() -> None:
    mine = FakeImage("sha256:a", CELL, "aaaaaaaaaaaa", [tag_of(CELL, "aaaaaaaaaaaa")])
    theirs = FakeImage("sha256:b", CELL, "bbbbbbbbbbbb", [tag_of(CELL, "bbbbbbbbbbbb")])
    theirs.labels["io.sglang-images.owner"] = "pytest-123"
    client = FakeClient([mine, theirs])
    assert [t for t, _ in footprint.superseded(client, {CELL: "c"}, tag_of)] == [tag_of(CELL, "aaaaaaaaaaaa")]  # type: ignore[arg-type]
    assert [t for t, _ in footprint.superseded(client, {CELL: "c"}, tag_of, owner="pytest-123")] == [  # type: ignore[arg-type]
        tag_of(CELL, "bbbbbbbbbbbb")]


def test_the_run_never_removes_what_it_built_even_when_the_tree_changed_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inputs come from the built image's label, not a fresh hash of a tree edited during the run."""
    from types import SimpleNamespace

    from buildscripts import pipeline
    from buildscripts.commands import build
    from buildscripts.results import BuildResult, ImageInfo, RunResults, Status, cell_record
    from buildscripts.workspace import Workspace

    built = FakeImage("sha256:new", CELL, "newnewnewnew", [tag_of(CELL, "newnewnewnew")])
    older = FakeImage("sha256:old", CELL, "oldoldoldold", [tag_of(CELL, "oldoldoldold")])
    client = FakeClient([built, older])
    record = cell_record(CELL, build=BuildResult(status=Status.PASSED), image=ImageInfo(
        ref=tag_of(CELL, "newnewnewnew"), id="sha256:new", labels=dict(built.labels)))
    run = RunResults(run_id="r", started="2026-12-01T10:00:00+00:00", cells=[record])
    monkeypatch.setattr(footprint, "prune_cache", lambda keep, builder: None)
    ctx = SimpleNamespace(client=client, builder=SimpleNamespace(name=None))
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    opts = build.parse([], Workspace.at(tmp_path), {})
    pipeline.bound_disk(run, tag_of, ctx, opts)  # type: ignore[arg-type]
    assert client.images.removed == [tag_of(CELL, "oldoldoldold")]


def test_an_engine_that_refuses_the_clean_up_leaves_a_warning_not_a_failed_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import docker.errors

    from buildscripts import pipeline
    from buildscripts.commands import build
    from buildscripts.results import RunResults
    from buildscripts.workspace import Workspace

    class Busy(FakeClient):
        def df(self) -> dict[str, Any]:
            raise docker.errors.APIError("a disk usage operation is already running")

    monkeypatch.setattr(footprint, "prune_cache", lambda keep, builder: None)
    run = RunResults(run_id="r", started="2026-12-01T10:00:00+00:00", cells=[])
    ctx = SimpleNamespace(client=Busy([]), builder=SimpleNamespace(name=None))
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    pipeline.bound_disk(run, tag_of, ctx, build.parse([], Workspace.at(tmp_path), {}))  # type: ignore[arg-type]
    assert "the engine could not list sizes" in footprint.advice(Busy([]), tmp_path, {}, tag_of)  # type: ignore[arg-type]


@pytest.mark.parametrize(("status", "cached", "pruned"), [
    ("passed", False, True),     # really built: its records go down to the bound before the next cell
    ("passed", True, False),     # every layer a cache hit: nothing new to prune
    ("failed", False, False),    # the run goes on; the bound is kept at its end (bound_disk)
])
def test_the_cache_is_bounded_after_each_cell_really_built(monkeypatch: pytest.MonkeyPatch, status: str,
                                                            cached: bool, pruned: bool) -> None:
    from buildscripts import pipeline
    from buildscripts.results import BuildResult, Status, cell_record

    calls: list[tuple[int | None, str | None]] = []
    monkeypatch.setattr(footprint, "prune_cache", lambda keep, builder: calls.append((keep, builder)))
    record = cell_record(CELL, build=BuildResult(status=Status(status), cached=cached))
    pipeline.bound_cache_after(record, 20 * 10**9, "b")
    assert calls == ([(20 * 10**9, "b")] if pruned else [])


@pytest.mark.parametrize(("free_gb", "keep", "path", "driver", "pruned"), [
    (10, 20 * 10**9, "/var/lib/docker", "docker", [0]),   # short of room for a cold cell: the unheld cache goes whole
    (31, 20 * 10**9, "/var/lib/docker", "docker", [0]),   # a cold run found 30.7 GB; its arm64 cell left 4.1
    (45, 20 * 10**9, "/var/lib/docker", "docker", []),    # room enough: the bound (after the cell) is all
    (10, None, "/var/lib/docker", "docker", []),          # --cache-keep none: never pruned
    (10, 20 * 10**9, None, "docker", []),                 # an engine elsewhere: this machine's disk says nothing
    (10, 20 * 10**9, "/var/lib/docker", "docker-container", []),   # its cache holds the built layers: kept
])
def test_a_build_short_of_disk_prunes_the_cache_first(monkeypatch: pytest.MonkeyPatch, free_gb: int,
                                                      keep: int | None, path: str | None, driver: str,
                                                      pruned: list[int]) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    asked: list[str] = []
    calls: list[int | None] = []

    def disk_usage(where: str) -> object:
        asked.append(where)
        return usage(0, 0, free_gb * 10**9)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    monkeypatch.setattr(footprint, "prune_cache", lambda keep, builder: calls.append(keep))
    footprint.make_room(path, keep, None, driver)
    assert calls == pruned
    assert set(asked) <= {path}   # the engine's own disk, or none


def test_only_a_local_engine_has_a_disk_here(tmp_path: Path) -> None:
    from buildscripts import engine

    found = engine.Engine("26.1", str(tmp_path), (), "")
    assert engine.local_root(found, {}) == str(tmp_path)
    assert engine.local_root(found, {"DOCKER_HOST": "unix:///run/docker.sock"}) == str(tmp_path)
    assert engine.local_root(found, {"DOCKER_HOST": "tcp://builder:2376"}) is None
    assert engine.local_root(engine.Engine("26.1", str(tmp_path / "absent"), (), ""), {}) is None
