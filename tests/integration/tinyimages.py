"""Tiny images for verification tests, made without a registry.

`python_image()` is the project's own debootstrapped base (Debian minbase + python3), made once per
test session through the same code as the builds (buildscripts.build.base). Everything else is derived
per test (`derive`, `no_python_image`) and removed by the test.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import docker
import pytest

from buildscripts import matrix
from buildscripts.build import base

FIFO = object()   # a file whose content is this marker becomes a named pipe (reading it blocks)
ROOT = Path(__file__).resolve().parents[2]


def python_image(client: docker.DockerClient) -> str:
    """The project's own bookworm base (Debian's python3, nothing else), built once by debootstrap.

    tests/conftest.py removes it at the end of the session when the session created it.
    """
    spec = matrix.load(ROOT / "matrix.yaml", {}).spec
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (.ci/install-engine installs it)")
    with tempfile.TemporaryDirectory(prefix="base-logs-") as logs:
        return base.ensure("bookworm", spec.bases["bookworm"], client=client, logs=Path(logs)).ref


def _tar(files: Mapping[str, bytes | object]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name.lstrip("/"))
            if content is FIFO:
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                assert isinstance(content, bytes)
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def derive(client: docker.DockerClient, base: str, files: Mapping[str, bytes | object],
           changes: list[str] | None = None) -> str:
    """`base` plus `files` (path -> bytes, or FIFO) and Dockerfile `changes` (ENV, LABEL, CMD), committed as a
    new throw-away image."""
    holder = client.containers.create(base, command=["true"])
    try:
        holder.put_archive("/", _tar(files))
        tag = f"sglang-images-test/derived:{uuid.uuid4().hex[:10]}"
        holder.commit(repository=tag.split(":", maxsplit=1)[0], tag=tag.split(":")[1], changes=changes or [])
        return tag
    finally:
        holder.remove(force=True)


def no_python_image(client: docker.DockerClient) -> str:
    """An image with one text file: no shell, no Python, no sleep."""
    tag = f"sglang-images-test/nopython:{uuid.uuid4().hex[:10]}"
    client.api.import_image_from_data(_tar({"hello.txt": b"hello\n"}), repository=tag.split(":", maxsplit=1)[0],
                               tag=tag.split(":")[1])
    return tag
