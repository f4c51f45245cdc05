"""Tiny images for verification tests, made without a registry.

`python_image()` is the project's own bootstrapped base (Debian minbase + python3), made once per
test session through the same code as the builds (buildscripts.build.base). Everything else is derived
per test (`derive`, `no_python_image`) and removed by the test. Each image made here carries the
session's owner label, so the session removes it at its end even when a test could not.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import docker

from buildscripts import matrix
from buildscripts.build import base
from tests import needs
from tests.session import OWNER

OWNED = {base.OWNER_LABEL: OWNER}
FIFO = object()   # a file whose content is this marker becomes a named pipe (reading it blocks)
ROOT = Path(__file__).resolve().parents[2]


def one_file_tar(payload: bytes, name: str = "hello.txt") -> bytes:
    """An uncompressed tar of one file: the layer of a tiny image of unique content."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return data.getvalue()


def python_image(client: docker.DockerClient) -> str:
    """The project's own bookworm base (Debian's python3, nothing else), built once by mmdebstrap.

    When this session builds it, it carries the session's owner label and goes at the session's end
    (tests/conftest.py); a base that was already there is used and left alone.
    """
    spec = matrix.load(ROOT / "matrix.yaml", {}).spec
    needs.tool("mmdebstrap")
    with tempfile.TemporaryDirectory(prefix="base-logs-") as logs:
        return base.ensure("bookworm", spec.bases["bookworm"], client=client, logs=Path(logs),
                           labels=OWNED).ref


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
        holder.commit(repository=tag.split(":", maxsplit=1)[0], tag=tag.split(":")[1],
                      changes=[*(changes or []), owner_change()])
        return tag
    finally:
        holder.remove(force=True)


def no_python_image(client: docker.DockerClient) -> str:
    """An image with one text file: no shell, no Python, no sleep."""
    tag = f"sglang-images-test/nopython:{uuid.uuid4().hex[:10]}"
    client.api.import_image_from_data(_tar({"hello.txt": b"hello\n"}), repository=tag.split(":", maxsplit=1)[0],
                                      tag=tag.split(":")[1], changes=[owner_change()])
    return tag


def owner_change() -> str:
    """The Dockerfile change that marks an image as this session's (a derived image would otherwise
    inherit the owner label of its base, which may be another session's or none)."""
    return f'LABEL "{base.OWNER_LABEL}"="{OWNER}"'
