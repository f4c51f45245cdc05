"""The Docker engine: one client per run, made at the top and passed down, and the checks made once
before the first cell (daemon reachable, new enough, buildx present)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import proc
from .errors import DiskSpaceError, EngineError

if TYPE_CHECKING:   # the SDK is imported where a client is made or used: `here` and `check` run without it
    import docker

MIN_ENGINE = (20, 10)
# A real SGLang cell needs ~10 GB for its first layers; refuse early rather than fail half-way.
MIN_FREE_BYTES = 12 * 1024**3


@dataclass(frozen=True)
class Engine:
    version: str
    root_dir: str
    runtimes: tuple[str, ...]
    buildx: str


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client of the engine DOCKER_HOST names (else the local socket), checked with a ping."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        msg = f"the Docker engine is not reachable ({exc})"
        hint = "start it (`dockerd &`, or `bash .ci/install-engine`) and check DOCKER_HOST"
        raise EngineError(msg, hint=hint) from None
    return client


def check(client: docker.DockerClient) -> Engine:
    """New enough for BuildKit secrets and cache mounts, and the buildx CLI plugin present."""
    import docker.errors

    try:
        info = client.info()
        version = str(client.version().get("Version", "0"))
    except docker.errors.DockerException as exc:
        msg = f"the Docker engine is not reachable ({exc})"
        raise EngineError(msg, hint="start it and check DOCKER_HOST") from None
    numbers = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if numbers < MIN_ENGINE:
        msg = f"Docker engine {version} is too old; BuildKit secrets and cache mounts need >= 20.10"
        raise EngineError(msg, hint="upgrade the engine")
    buildx = proc.which("docker", hint="install the Docker CLI")
    probe = proc.run([buildx, "buildx", "version"], timeout=30)
    if not probe.ok:
        msg = "the docker buildx plugin is missing"
        raise EngineError(msg, hint="install docker-buildx (`bash .ci/install-engine` does it on Debian)")
    runtimes = tuple(sorted(info.get("Runtimes", {})))
    return Engine(version, str(info.get("DockerRootDir", "/var/lib/docker")), runtimes, probe.output.strip())


def platform(client: docker.DockerClient) -> tuple[str, str]:
    """The engine's os and architecture as an image index names them (`linux`, `amd64`)."""
    version = client.version()
    return str(version.get("Os") or "linux"), str(version.get("Arch") or "amd64")


def disk_path(engine: Engine) -> str:
    """Where the engine keeps images and build cache on this machine (its root dir; / for an engine elsewhere)."""
    return local_root(engine, os.environ) or "/"


def local_root(engine: Engine, env: Mapping[str, str]) -> str | None:
    """The engine's root dir when the engine is this machine's (no DOCKER_HOST, or a unix socket, and the dir is
    here); None for an engine elsewhere, whose disk this machine cannot measure."""
    host = env.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    return engine.root_dir if os.path.exists(engine.root_dir) else None


def check_disk(engine: Engine, cells: int, advice: Callable[[], str] | None = None) -> None:
    """Room for `cells` new cell builds; when short, `advice()` names what to prune (build/footprint.py)."""
    path = disk_path(engine)
    free = shutil.disk_usage(path).free
    if cells and free < MIN_FREE_BYTES:
        msg = f"only {free / 1024**3:.1f} GB free under {path}; a cell needs about {MIN_FREE_BYTES / 1024**3:.0f} GB"
        hint = advice() if advice else "free space: `docker image prune`, `docker builder prune`"
        raise DiskSpaceError(msg, hint=hint)
