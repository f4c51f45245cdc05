"""Tiny images for verification tests, made without a registry.

`python_image()` is a Debian minbase + python3 made with debootstrap from the host's own mirror and
`docker import`-ed once; it is cached under PY_IMAGE (labelled `sglang-images.test-cache=1`, remove
it with `docker rmi sglang-images-test/py:bookworm`) because building it takes about a minute.
Everything else is derived per test (`derive`, `no_python_image`) and removed by the test.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

import docker
import pytest

PY_IMAGE = "sglang-images-test/py:bookworm"
CACHE_LABEL = "sglang-images.test-cache=1"
FIFO = object()   # a file whose content is this marker becomes a named pipe (reading it blocks)


def debian_mirror() -> str:
    """The host's Debian mirror, from its apt sources (deb822 first, then the one-line format)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        text = path.read_text()
        for block in text.split("\n\n"):
            uri = re.search(r"^URIs:\s*(\S+)", block, re.M)
            if uri and re.search(r"^Suites:.*\bbookworm\b", block, re.M) and "security" not in uri.group(1):
                return uri.group(1)
    sources = Path("/etc/apt/sources.list")
    if sources.exists() and (m := re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", sources.read_text(), re.M)):
        return m.group(1)
    pytest.skip("no Debian bookworm mirror in /etc/apt sources to debootstrap a Python image from")


def python_image(client: docker.DockerClient) -> str:
    try:
        client.images.get(PY_IMAGE)
        return PY_IMAGE
    except docker.errors.ImageNotFound:
        pass
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (.ci/install-engine installs it)")
    with tempfile.TemporaryDirectory(prefix="py-rootfs-") as tmp:
        root = Path(tmp) / "root"
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(root),
                        debian_mirror()], check=True, capture_output=True)
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(tarball), "."], check=True)
        subprocess.run(["docker", "import", "--change", f"LABEL {CACHE_LABEL}", "--change",
                        'CMD ["/bin/bash"]', str(tarball), PY_IMAGE], check=True, capture_output=True)
    return PY_IMAGE


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


def derive(client: docker.DockerClient, base: str, files: Mapping[str, bytes | object]) -> str:
    """`base` plus `files` (path -> bytes, or FIFO), committed as a new throw-away image."""
    holder = client.containers.create(base, command=["true"])
    try:
        holder.put_archive("/", _tar(files))
        tag = f"sglang-images-test/derived:{uuid.uuid4().hex[:10]}"
        holder.commit(repository=tag.split(":", maxsplit=1)[0], tag=tag.split(":")[1])
        return tag
    finally:
        holder.remove(force=True)


def no_python_image(client: docker.DockerClient) -> str:
    """An image with one text file: no shell, no Python, no sleep."""
    tag = f"sglang-images-test/nopython:{uuid.uuid4().hex[:10]}"
    client.api.import_image_from_data(_tar({"hello.txt": b"hello\n"}), repository=tag.split(":", maxsplit=1)[0],
                               tag=tag.split(":")[1])
    return tag
