"""The SBOM collector run inside a real SGLang image of the pip cell, if this engine holds one (`nox -s build`
makes it; this test builds nothing): it names torch, sglang, sglang-kernel, flashinfer-python and
nvidia-cuda-nvcc with the versions and sha256s of the cell's locks, every Debian package, and the baked caches."""

from __future__ import annotations

import json

import docker
import pytest

from buildscripts.attest import inventory, sbom
from buildscripts.matrix.schema import LABEL_PREFIX
from tests.sbom_tree import KEY, LOCKS, PIP_CELL, pinned

pytestmark = pytest.mark.integration


def test_the_pip_cells_image_lists_what_its_locks_pin(client: docker.DockerClient) -> None:
    images = client.images.list(filters={"label": f"{LABEL_PREFIX}.cell={PIP_CELL}"})
    if not images:
        pytest.skip(f"no image of {PIP_CELL} in this engine: `nox -s build -- --only {PIP_CELL}` makes one")
    image = str(images[0].id)
    found = inventory.from_image(client, image)
    subject = sbom.Subject(repository="local", digest="sha256:" + "0" * 64, cell_id=PIP_CELL)
    document = json.loads(sbom.to_json(sbom.bom(found, subject, LOCKS)))
    listed = {c["name"]: c for c in document["components"]}
    pins = pinned()
    for name in KEY:
        assert listed[name]["version"] == pins[name].version, name
        assert sorted(f"sha256:{h['content']}" for h in listed[name]["hashes"]) == sorted(pins[name].hashes), name
    assert listed["libstdc++6"]["purl"].startswith("pkg:deb/debian/libstdc%2B%2B6@")
    assert len(found.debian) > 50 and found.os.get("VERSION_CODENAME") == "bookworm"
    assert found.warm_archs and all(cache.archs for cache in found.baked)
    assert not client.containers.list(all=True, filters={"label": f"{LABEL_PREFIX}.inventory={image}"})
