"""The SBOM collector run inside a real SGLang image of the pip cell, if this engine holds one (`nox -s build`
makes it; this test builds nothing): it names torch, sglang, sglang-kernel, flashinfer-python and
nvidia-cuda-nvcc with the versions and sha256s of the cell's locks, every Debian package, and the baked caches."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import docker.models.images
import pytest

from buildscripts.attest import describe, inventory, provenance, sbom
from buildscripts.matrix.schema import LABEL_PREFIX
from buildscripts.trust import described, keys, verdicts
from tests import needs
from tests.attest_world import key_env
from tests.sbom_tree import KEY, LOCKS, PIP_CELL, ROOT, pinned

pytestmark = pytest.mark.integration


def pip_cell_images(client: docker.DockerClient) -> list[docker.models.images.Image]:
    """The pip cell's images in this engine; CI's main job builds the default matrix before the tests, so none
    there is a failure (needs.py)."""
    images = client.images.list(filters={"label": f"{LABEL_PREFIX}.cell={PIP_CELL}"})
    if not images:
        needs.unavailable(f"an image of {PIP_CELL} in this engine", f"`nox -s build -- --only {PIP_CELL}` makes one")
    return list(images)


def test_the_pip_cells_image_lists_what_its_locks_pin(client: docker.DockerClient) -> None:
    images = pip_cell_images(client)
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


def test_describing_the_pip_cells_image_writes_both_signed_for_its_digest(client: docker.DockerClient,
                                                                          tmp_path: Path) -> None:
    """What the build does after staging (attest/describe.py), but for attaching: the two files, each read back as
    `check` reads it, for the digest they name."""
    images = pip_cell_images(client)
    key = keys.signing_key(key_env(tmp_path / "key"))
    digest = "sha256:" + "1" * 64
    facts = provenance.BuildFacts(cell_id=PIP_CELL, definition_digest="2" * 64, parameters={}, locks=LOCKS,
                                  base={"suite": "bookworm", "id": "sha256:" + "3" * 64}, engine="20.10",
                                  builder_id=provenance.LOCAL_BUILDER, run_id="run", finished="now")
    request = describe.Request(image=str(images[0].id), facts=facts, root=ROOT, run_dir=tmp_path / "run", key=key,
                               trusted=[key.public], attach=False,
                               subject=sbom.Subject(repository="registry.example/x", digest=digest, cell_id=PIP_CELL))
    paths = describe.make(client, request)
    assert [p.name for p in paths] == ["sbom.json", "provenance.json"]
    for path, kind in zip(paths, (described.SBOM, described.PROVENANCE), strict=True):
        found = described.find([verdicts.read_envelope(path)], kind, digest, [key.public])
        assert found.used is not None and not found.refused
    made = described.find([verdicts.read_envelope(paths[1])], described.PROVENANCE, digest, [key.public])
    assert made.used is not None
    deps = made.used.predicate["buildDefinition"]["resolvedDependencies"]
    assert [d["name"] for d in deps][:3] == [f"lockfiles/{shown}" for shown, _ in LOCKS]
