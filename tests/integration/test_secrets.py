"""The host's secrets reach a real BuildKit build the way they reach every cell (build.buildx.build_secrets:
this host's CA bundle and pip index settings), and the saved image holds none of them; an image whose
recipe copies the secrets into a layer is caught, so the scan is shown to find what it looks for.

The image is the project's tiny Python base plus one step shaped like the Dockerfile's install steps
(`. /run/secrets/index`, the bundle as PIP_CERT/SSL_CERT_FILE). The e2e tier scans its real cells the same
way (tests/e2e/test_cell_secrets.py).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from buildscripts import hostenv, proc
from buildscripts.build.buildx import build_secrets
from tests import secretscan
from tests.integration import tinyimages
from tests.integration.tinyimages import owner_change

USE = ". /run/secrets/index && export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca && " \
      "test -r /run/secrets/ca && env | grep -c '^PIP_\\|^UV_' > /opt/used-settings"
LEAK = "cp /run/secrets/ca /etc/leaked-ca.crt && cp /run/secrets/index /opt/leaked-index.env"
# Used only where this host's pip settings name no network index (only those reach builds).
PLANTED_INDEX = "https://ci-user:planted-s3cret@index.invalid/simple"


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    """This host's environment; plus a planted index URL with a password where the host's pip settings
    name no network index (then nothing would test that path)."""
    host = dict(os.environ)
    index = hostenv.index_settings(host)
    if not (index.index_url or index.extra_index_urls):
        print("this host's pip settings name no network index: planting one with a password")
        host["PIP_EXTRA_INDEX_URL"] = PLANTED_INDEX
    return host


def build(client: docker.DockerClient, base: str, step: str, env: dict[str, str], tmp: Path) -> str:
    """`base` + one RUN with the build's secrets mounted, built by buildx with build_secrets(env)."""
    context = tmp / f"context-{uuid.uuid4().hex[:6]}"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\n{owner_change()}\n"
        f"RUN --mount=type=secret,id=ca --mount=type=secret,id=index {step}\n")
    tag = f"sglang-images-test/secrets:{uuid.uuid4().hex[:10]}"
    with build_secrets(env) as secrets:
        # --no-cache: BuildKit keys its cache without the secrets, so a cached step would hold older ones.
        done = proc.run(["docker", "buildx", "build", "--progress=plain", "--no-cache", "--tag", tag, *secrets,
                         "--build-arg", f"BASE_IMAGE={base}", str(context)], log=tmp / "build.log",
                        timeout=600, env={"DOCKER_BUILDKIT": "1"})
    assert done.ok, done.tail()
    return tag


Scanned = tuple[list[secretscan.Finding], dict[str, int]]


@pytest.fixture(scope="module")
def scanned(client: docker.DockerClient, env: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Scanned]]:
    """Both images, each scanned at once after its build, both ways (saved, and in place), then removed."""
    base = tinyimages.python_image(client)
    tmp = tmp_path_factory.mktemp("secrets")
    secrets = secretscan.host_secrets(env)
    found: dict[str, Scanned] = {}
    for name, step in (("saved", USE), ("leaky", f"{USE} && {LEAK}")):
        tag = build(client, base, step, env, tmp)
        try:
            found[name] = secretscan.scan_saved(
                secretscan.ChunkReader(client.images.get(tag).save(named=False)), secrets)
            found[f"{name} in place"] = secretscan.scan_in_place(client, tag, secrets)
        finally:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(tag, force=True)
    yield found


@pytest.mark.parametrize("how", ["saved", "saved in place"])
def test_an_image_built_with_the_hosts_secrets_holds_none_of_them(
        scanned: dict[str, Scanned], env: dict[str, str], how: str) -> None:
    findings, counts = scanned[how]
    assert findings == [], secretscan.describe(findings)
    assert counts["layers"] >= 2 and counts["configs"] >= 1, counts   # the base's layer and the RUN's
    needles = sorted(secretscan.host_secrets(env).needles)
    print(f"scanned {counts}: 0 of {len(needles)} secrets found ({', '.join(needles)})")


@pytest.mark.parametrize("how", ["leaky", "leaky in place"])
def test_secrets_copied_into_a_layer_are_found(scanned: dict[str, Scanned], env: dict[str, str], how: str) -> None:
    findings, _ = scanned[how]
    found = {f.what for f in findings if f.where.endswith(("etc/leaked-ca.crt", "opt/leaked-index.env"))}
    # Everything the two files can hold: the PEM text (not the DER bytes) and each index URL, host, password.
    expected = {what for what in secretscan.host_secrets(env).needles if "(DER)" not in what}
    assert expected, "nothing to look for"
    assert expected <= found, (sorted(expected - found), secretscan.describe(findings))
