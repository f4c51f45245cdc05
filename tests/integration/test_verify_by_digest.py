"""`verify REPO@sha256:…` where a GPU job of a staging build runs it: a registry on 127.0.0.1 and an engine
started with `--bridge=none` (no bridge network, no iptables: containers share the host's network), as on
an H200 test machine. Both run in a network namespace of their own here, so the engine's `--bridge=none`
touches no bridge of this machine's engine; the verify command runs in it too, and reaches the registry on
that namespace's loopback.

The image is the project's debootstrapped base (python3 and nothing else): the `facts` stage runs the
probe inside it, which needs a container to start on that engine; what is asserted is the pull by digest
and what the record says of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import docker
import pytest

from buildscripts import results
from buildscripts.registry import manifests, references
from buildscripts.verify import pulled
from tests import needs, second_engine
from tests.integration.tinyimages import derive, python_image
from tests.registry_server import RegistryServer

pytestmark = pytest.mark.registry
ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ)


def test_verify_by_digest_pulls_that_digest_on_an_engine_without_a_bridge(
        client: docker.DockerClient, tmp_path: Path) -> None:
    second_engine.require()
    base = python_image(client)
    with second_engine.network_namespace() as netns:
        server = RegistryServer(tmp_path / "registry", netns=netns)
        server.folder.mkdir()
        server.start()
        try:
            with second_engine.second_engine(tmp_path / "engine", netns=netns) as engine:
                assert engine.client().networks.list(names=["bridge"]) == []   # no bridge at all
                engine.load(base)
                repository = f"{server.url}/sglang-images-staging"
                engine.client().api.tag(base, repository, "base")
                inside = second_engine.in_netns(netns)
                subprocess.run([*inside, "docker", "push", f"{repository}:base"], env=engine.env,
                               capture_output=True, check=True)
                digest = subprocess.run(
                    [*inside, "skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                     f"docker://{repository}:base"], capture_output=True, text=True, check=True).stdout.strip()
                engine.client().images.remove(f"{repository}:base")
                engine.client().images.remove(base)       # nothing local: the pull must fetch it
                out = tmp_path / "verify" / "results.json"
                env = {**os.environ, "DOCKER_HOST": engine.host}
                done = subprocess.run([*inside, sys.executable, "-m", "buildscripts", "verify",
                                       f"{repository}@{digest}", "--stages", "facts", "--out", str(out)],
                                      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, done.stdout + done.stderr
                refused = subprocess.run([*inside, sys.executable, "-m", "buildscripts", "verify", "--pull",
                                          f"{repository}:base", "--out", str(tmp_path / "no.json")],
                                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        finally:
            server.stop()
    cell = results.load(out).cells[0]
    assert (cell.image.repository, cell.image.digest, cell.image.ref) == (repository, digest, f"{repository}@{digest}")
    assert cell.image.subject == f"{repository}@{digest}"
    # the containerd image store names the image by its manifest digest; the classic store by its config's
    assert cell.image.id in {digest, client.images.get(base).id}
    facts = cell.stage("facts")
    assert facts is not None and facts.status.value == "passed", facts
    assert json.loads(out.read_text())["cells"][0]["seal"]   # sealed like every verifier's record
    assert refused.returncode == 2 and "names a tag, not a digest" in refused.stderr + refused.stdout
    assert references.by_digest(cell.image.ref or "") == (repository, digest)


def test_an_index_is_recorded_with_the_manifest_of_this_platform(
        client: docker.DockerClient, server: RegistryServer, tmp_path: Path) -> None:
    """An image index (what a multi-platform build pushes) by digest: the engine runs this platform's manifest,
    and the record names both digests, the index's as the subject."""
    needs.tool("skopeo")
    base = python_image(client)
    repository = f"{server.url}/sglang-images-staging"
    other = derive(client, base, {"/other-platform.txt": b"not this platform's image"})
    for image, tag in ((base, "base"), (other, "other")):
        client.api.tag(image, repository, tag)
        try:
            client.images.push(repository, tag=tag)
        finally:
            client.images.remove(f"{repository}:{tag}")
    client.images.remove(other)
    child, elsewhere = (manifests.served(f"{repository}:{tag}", ENV) for tag in ("base", "other"))
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": m.media_type, "digest": m.digest, "size": _size(repository, m.digest),
         "platform": {"architecture": arch, "os": "linux"}}
        for m, arch in ((elsewhere, "arm64"), (child, "amd64"))]}).encode()   # another platform's first
    request = urllib.request.Request(f"http://{repository.replace('/', '/v2/', 1)}/manifests/multi", data=index,
                                     method="PUT", headers={"Content-Type": "application/vnd.oci.image.index.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        digest = answer.headers["Docker-Content-Digest"]
    try:
        found = pulled.pull(client, f"{repository}@{digest}", ENV)
    finally:   # the reference the pull added (the base image itself stays)
        client.images.remove(f"{repository}@{digest}")
    assert (found.digest, found.platform_digest, found.id) == (digest, child.digest, client.images.get(base).id)
    assert found.subject == f"{repository}@{digest}"


def _size(repository: str, digest: str) -> int:
    """The byte length of a manifest as the registry serves it (an index entry must say it)."""
    host, _, name = repository.partition("/")
    request = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{digest}", method="HEAD", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(answer.headers["Content-Length"])
