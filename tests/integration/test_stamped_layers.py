"""Layer times on both engines of this machine, through the flags the cell builds use (build/buildx.py).

Docker 26 with the containerd image store (the tests' second engine, BuildKit 0.13): a build stamped with
SOURCE_DATE_EPOCH and rewrite-timestamp, written as a docker archive and loaded, is the same image twice, however
the context's files were touched in between; the file in its layer and its config carry the epoch. Docker 20.10's
own builder (BuildKit 0.8) is asked too and said unable, and two builds of it differ only in the copied file's
mtime and the config's times, which `compare` names so."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import time
from contextlib import closing
from pathlib import Path

import docker
import pytest

from buildscripts.build import buildx, cache, imagearchive
from buildscripts.compare import diff, images
from tests import needs, second_engine
from tests.session import owner_label

EPOCH = 1783764997
DOCKERFILE = "FROM scratch\nCOPY hello.txt /hello.txt\n"


def context(tmp_path: Path) -> Path:
    folder = tmp_path / "context"
    folder.mkdir()
    (folder / "Dockerfile").write_text(DOCKERFILE)
    (folder / "hello.txt").write_text("hello\n")
    return folder


def build(env: dict[str, str], folder: Path, tag: str, output: buildx.Output) -> None:
    """A cold build (BuildKit's cache keys of a COPY ignore mtimes: a cached one would hide the difference)."""
    os.utime(folder / "hello.txt")   # a fresh checkout: the file's mtime is now
    time.sleep(1.1)                  # and the build's own time a second later than the last one's
    done = subprocess.run(["docker", "buildx", "build", "--progress=plain", "--no-cache", "--tag", tag,
                           "--label", owner_label(), *output.args, str(folder)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if output.archive is not None:
        loaded = subprocess.run(["docker", "load", "--input", str(output.archive)], env=env, capture_output=True,
                                text=True, timeout=300)
        assert loaded.returncode == 0, loaded.stderr


def test_a_stamped_build_on_buildkit_0_13_is_the_same_image_twice(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    second_engine.require()
    folder = context(tmp_path)
    with second_engine.second_engine(tmp_path / "engine") as engine:
        monkeypatch.setenv("DOCKER_HOST", engine.host)   # `docker buildx inspect` asks this engine
        builder = cache.builder(None, engine.client().info())
        assert builder.rewrites_timestamps, builder
        for number in (1, 2):
            with buildx.reproducible_output(EPOCH, tmp_path) as output:
                build(engine.env, folder, f"stamped/hello:{number}", output)
        client = engine.client()
        first, second = (client.images.get(f"stamped/hello:{n}") for n in (1, 2))
        assert first.id == second.id
        image = images.read(client, "stamped/hello:1")
        (entry,) = [e for e in image.files().values() if e.path == "hello.txt"]
        assert entry.mtime == EPOCH
        assert image.config["created"].startswith("2026-07-11T10:16:37")


def test_a_base_loads_into_the_containerd_store_with_its_config_as_written(tmp_path: Path) -> None:
    """The containerd store names a loaded image by the manifest it writes; the config in it is the one written."""
    second_engine.require()
    layer = tmp_path / "rootfs.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("etc/hello")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    spec = imagearchive.Spec(platform="linux/amd64", env=("PATH=/usr/bin",), labels={"a": "1"}, epoch=EPOCH,
                             created_by="test")
    with second_engine.second_engine(tmp_path / "engine") as engine:
        client = engine.client()
        image_ids = [imagearchive.load(client, layer, spec, tag=f"stamped/base:{n}", work=tmp_path) for n in (1, 2)]
        assert image_ids[0] == image_ids[1]
        config = images.read(client, "stamped/base:1").config
    assert config == json.loads(imagearchive.config(spec, imagearchive.sha256_of(layer)))


def test_docker_20_10s_builder_cannot_and_its_builds_differ_in_mtime_and_config(tmp_path: Path) -> None:
    folder = context(tmp_path)
    with closing(docker.from_env()) as client:
        builder = cache.builder(None, client.info())
        if builder.rewrites_timestamps:
            needs.unavailable("Docker 20.10's own builder as the main engine",
                              f"this one rewrites timestamps (BuildKit {builder.buildkit}); .ci/install-engine "
                              "installs Debian bookworm's docker.io 20.10")
        tags = [f"sglang-images-test/unstamped:{n}-{os.getpid()}" for n in (1, 2)]
        try:
            for tag in tags:
                with buildx.reproducible_output(None, tmp_path) as output:
                    build({**os.environ, "DOCKER_BUILDKIT": "1"}, folder, tag, output)
            found = diff.compare(images.read(client, tags[0]), images.read(client, tags[1]))
        finally:
            client.images.remove(tags[0], force=True)
            client.images.remove(tags[1], force=True)
    assert [(d.reason, d.path) for d in found.groups["mtime"]] == [("mtime", "hello.txt")]
    assert set(found.groups) == {"mtime", "config"}
    assert "created" in {d.path for d in found.groups["config"]}


def test_zstd_layers_are_written_by_a_stamping_builder_and_pushed_as_they_are(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--layer-compression zstd` on BuildKit 0.13: the loaded image's layers are zstd, and the engine pushes them as
    they are (an OCI manifest of `+zstd` layers), so the digest a GPU job pulls is the zstd image's."""
    from tests.registry_server import RegistryServer

    second_engine.require()
    needs.tool("skopeo")
    folder = context(tmp_path)
    registry = RegistryServer(tmp_path / "registry")
    registry.folder.mkdir()
    registry.start()
    try:
        with second_engine.second_engine(tmp_path / "engine") as engine:
            monkeypatch.setenv("DOCKER_HOST", engine.host)
            builder = cache.builder(None, engine.client().info())
            assert builder.rewrites_timestamps, builder
            ref = f"{registry.url}/stamped/hello:zstd"
            with buildx.reproducible_output(EPOCH, tmp_path, "zstd") as output:
                build(engine.env, folder, ref, output)
            pushed = subprocess.run(["docker", "push", ref], env=engine.env, capture_output=True, text=True,
                                    timeout=300)
            assert pushed.returncode == 0, pushed.stderr
        done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
                              capture_output=True, text=True, check=True)
        manifest = json.loads(done.stdout)
        if "manifests" in manifest:   # an index: its one image manifest
            (entry,) = [m for m in manifest["manifests"] if m.get("platform", {}).get("os") != "unknown"]
            done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                                   f"docker://{registry.url}/stamped/hello@{entry['digest']}"],
                                  capture_output=True, text=True, check=True)
            manifest = json.loads(done.stdout)
        assert manifest["layers"]
        assert all(layer["mediaType"].endswith("+zstd") for layer in manifest["layers"]), manifest["layers"]
    finally:
        registry.stop()
