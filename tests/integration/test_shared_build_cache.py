"""The build cache shared between runners, for real: a second engine (Docker 26, containerd image store)
plays two runners in turn, a loopback registry holds the cache, and the flags are the project's own
(build/cache.py). The base is debootstrapped once and shared through the registry: every layer's cache
key hangs on the base image's id, so a runner that debootstrapped its own would never hit the cache.

Runner 1's base is the one the machine's engine holds (the main job's, else this session debootstraps it
there: tinyimages.python_image), loaded into the second engine: a debootstrap of its own there would cost
minutes and show nothing the main job did not (benchmarks/suite-results.md)."""

from __future__ import annotations

import subprocess
from contextlib import closing
from functools import partial
from pathlib import Path

import docker
import pytest

from buildscripts import matrix
from buildscripts.build import base, cache
from buildscripts.matrix.schema import Cache
from tests import needs, second_engine
from tests.integration.tinyimages import python_image
from tests.registry_server import RegistryServer

ROOT = Path(__file__).resolve().parents[2]
RECIPE = """\
ARG BASE
FROM $BASE AS lane
RUN python3 -c "import time; open('/lane', 'w').write(repr(time.time()))"
FROM lane AS cell
ARG CELL
RUN echo "$CELL" > /cell
"""


def build(engine: second_engine.SecondEngine, context: Path, base_ref: str, cell: str, args: list[str]) -> str:
    """`docker buildx build` of the tiny recipe's cell on `engine` with the project's cache flags; the log."""
    done = subprocess.run(
        ["docker", "buildx", "build", "--progress=plain", "--target", "cell", "--tag", f"cache-test/{cell}:1",
         "--build-arg", f"BASE={base_ref}", "--build-arg", f"CELL={cell}", *args, str(context)],
        env=engine.env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def lane_stamp(client: docker.DockerClient, image: str) -> str:
    return client.containers.run(image, ["cat", "/lane"], remove=True).decode()


def test_a_fresh_runner_builds_on_the_cache_another_runner_pushed(tmp_path: Path, server: RegistryServer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    second_engine.require()
    spec = matrix.load(ROOT / "matrix.yaml", {}).spec
    with closing(docker.from_env()) as main:
        debootstrapped = python_image(main)
        layers = main.images.get(debootstrapped).attrs["RootFS"]["Layers"]
    context = tmp_path / "recipe"
    context.mkdir()
    (context / "Dockerfile").write_text(RECIPE)
    with second_engine.second_engine(tmp_path / "engine") as engine:
        engine.load(debootstrapped)   # runner 1's base (from the machine's engine: before DOCKER_HOST names this one)
        monkeypatch.setenv("DOCKER_HOST", engine.host)   # `docker buildx inspect` asks this engine
        client = engine.client()
        builder = cache.builder(None, client.info())
        assert (builder.driver, builder.exports_cache) == ("docker", True)
        plan, notes = cache.plan(Cache(ref=f"{server.url}/sglang-images/cache"), builder)
        assert plan is not None and plan.exports and notes == []
        shared = partial(plan.base_ref, "bookworm")

        # runner 1: has the debootstrapped base (the registry has none yet), shares it, builds cell `a`, exports
        # its cache
        first = base.ensure("bookworm", spec.bases["bookworm"], client=client, logs=tmp_path, shared=shared,
                            push=True)
        assert (first.ref, first.built) == (debootstrapped, False)   # its own, neither pulled nor built again
        assert client.images.get(first.ref).attrs["RootFS"]["Layers"] == layers
        log_a = build(engine, context, first.ref, "a", builder.args() + plan.args("a", ["b"]))
        assert "exporting cache" in log_a or "writing cache manifest" in log_a
        stamp = lane_stamp(client, "cache-test/a:1")

        engine.wipe()   # runner 2 starts bare: no image, no build cache
        assert client.images.list(all=True) == []

        second = base.ensure("bookworm", spec.bases["bookworm"], client=client, logs=tmp_path, shared=shared,
                             push=True)
        assert not second.built and second.id == first.id   # pulled: the very same base
        log_b = build(engine, context, second.ref, "b", builder.args() + plan.args("b", ["a"]))
        lane_step = next(line for line in log_b.splitlines() if "[lane 2/2] RUN" in line).split()[0]
        # the lane layer came from the registry (BuildKit says CACHED, or shows the layer it pulls)...
        assert f"{lane_step} CACHED" in log_b or f"{lane_step} extracting sha256:" in log_b, log_b[-3000:]
        assert lane_stamp(client, "cache-test/b:1") == stamp   # ...byte for byte, not rebuilt
        assert client.containers.run("cache-test/b:1", ["cat", "/cell"], remove=True).decode().strip() == "b"


def test_docker_20_10s_default_builder_cannot_export_a_cache_and_says_what_can() -> None:
    """The main engine of these tests is Docker 20.10 with the classic image store (`.ci/install-engine`):
    its default builder imports a registry cache but cannot export one. (The engine-26 test above shows
    the containerd image store can.)"""
    with closing(docker.from_env()) as client:
        info = client.info()
    if not str(info.get("ServerVersion", "")).startswith("20.10") or cache.containerd_store(info):
        needs.unavailable("Docker 20.10 with the classic image store as the main engine",
                          f"this one is Docker {info.get('ServerVersion')}; .ci/install-engine installs Debian "
                          "bookworm's docker.io 20.10")
    builder = cache.builder(None, info)
    assert (builder.driver, builder.exports_cache) == ("docker", False)
    assert builder.why_not and "containerd image store" in builder.why_not and "--builder NAME" in builder.why_not
