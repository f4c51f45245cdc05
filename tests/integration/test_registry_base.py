"""A base declared as `image: REF` comes from a registry (here a real one on loopback)."""

from __future__ import annotations

import contextlib
import io
import tarfile
from pathlib import Path

import docker
import docker.errors
import pytest

from buildscripts.build import base
from buildscripts.errors import ToolMissingError
from buildscripts.matrix import schema as config
from tests.integration.tinyimages import owner_change
from tests.registry_server import RegistryServer


def registry_base(ref: str) -> config.Base:
    return config.Base(image=ref, python="3.11", platform="x86_64-manylinux_2_36")


def tiny_rootfs() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"a base that lives in a registry\n"
        info = tarfile.TarInfo("etc/base-marker")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_registry_base_is_pulled_when_absent(server: RegistryServer, tmp_path: Path) -> None:
    client = docker.from_env()
    ref = f"{server.url}/tiny-base:1"
    client.api.import_image_from_data(tiny_rootfs(), repository=f"{server.url}/tiny-base", tag="1",
                                      changes=[owner_change()])
    pushed_id = str(client.images.get(ref).id)
    try:
        for line in client.api.push(ref, stream=True, decode=True):
            assert "error" not in line, line
        client.images.remove(ref, force=True)
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(ref)
        found = base.ensure("from-registry", registry_base(ref), client=client, logs=tmp_path)
        assert found.ref == ref and found.id == pushed_id and not found.built
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(ref, force=True)


def test_a_registry_base_that_cannot_be_pulled_is_a_clear_error(server: RegistryServer, tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError, match="cannot be pulled") as err:
        base.ensure("missing", registry_base(f"{server.url}/no-such-base:1"), client=docker.from_env(),
                    logs=tmp_path)
    assert "debootstrap" in str(err.value)
