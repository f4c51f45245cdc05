"""One good tag for both platforms, against a real registry on loopback, skopeo and cosign.

The linux/amd64 and linux/arm64 cells of SGLang 0.5.23 render the same good tags. The amd64 image is a tiny
image staged from this engine as `build --stage` stages it (a Docker manifest); the arm64 one is a tiny arm64
image written to the staging repository by skopeo from an OCI layout, as a native arm64 build runner would push
it (an OCI manifest), recorded as the staging build records it. GPU jobs' stages are fixtures
(tests/digest_records.py); everything else is real, and every assertion reads the registry itself.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from buildscripts import matrix
from buildscripts.commands import check as check_command
from buildscripts.commands import promote as promote_command
from buildscripts.errors import NotVerified, RegistryError
from buildscripts.publish import platformtags, staging
from buildscripts.registry import manifests, writer_lock
from buildscripts.results import CellResult
from buildscripts.trust import keys, verdicts
from buildscripts.workspace import Workspace
from tests import needs
from tests.commands import call
from tests.digest_records import arch_runners_matrix, built, cell_of, gpu_job, save
from tests.integration.test_promote_by_digest import skopeo_digest
from tests.integration.tinyimages import one_file_tar
from tests.registry_server import RegistryServer

pytestmark = pytest.mark.registry
ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ)
AMD64, ARM64 = "sglang0.5.23-torch2.14.1-cu130-pip-bookworm", "sglang0.5.23-torch2.14.1-cu130-pip-bookworm-arm64"
FREE, SM100, SM120 = ("0.5.23-torch2.14.1-cu130-pip", "0.5.23-torch2.14.1-cu130-pip-verified-sm100",
                      "0.5.23-torch2.14.1-cu130-pip-verified-sm120")
STAGING = "sglang-images-staging"


def push_layout(ref: str, architecture: str) -> tuple[str, str]:
    """A tiny image of `architecture` (unique content) written to `ref` by skopeo from an OCI layout, as a
    native build of that platform pushes it; returns (manifest digest, config digest: its image id)."""
    folder = Path(f"/tmp/sglang-images-layout-{uuid.uuid4().hex[:8]}")
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    tar = one_file_tar(f"{architecture} {uuid.uuid4()}".encode())
    layer = gzip.compress(tar, mtime=0)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    config = json.dumps({"architecture": architecture, "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(config),
                                      "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": blob(layer), "size": len(layer)}]}).encode()
    digest = blob(manifest)
    (folder / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": len(manifest)}]}))
    try:
        subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", f"oci:{folder}",
                        f"docker://{ref}"], check=True, capture_output=True)
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    return digest, "sha256:" + hashlib.sha256(config).hexdigest()


class Platforms:
    """Staging builds of the amd64 and arm64 cells of one release, and the GPU jobs that verify them."""

    def __init__(self, client: docker.DockerClient, server: RegistryServer, tmp: Path,
                 tiny: Callable[[], str]) -> None:
        self.client, self.tmp, self.tiny = client, tmp, tiny
        self.matrix_path = arch_runners_matrix(tmp / "project")
        self.loaded = matrix.load(self.matrix_path)
        self.url = server.url
        self.source = f"{server.url}/{STAGING}"
        self.dest = f"{server.url}/{self.loaded.spec.tags.repository}"
        self.builds: dict[str, CellResult] = {}
        self.jobs = 0

    def stage(self, cell_id: str, *, architecture: str | None = None) -> str:
        """Stage a new image for `cell_id` (of `architecture`, by default the cell's own); return its digest."""
        cell = cell_of(self.loaded, cell_id)
        architecture = architecture or cell.platform.split("/")[1]
        if architecture == "amd64":
            record = built(cell, self.tiny())
            image = staging.stage(self.client, record, self.source, ENV)
        else:
            ref = f"{self.source}:{cell.id}-{uuid.uuid4().hex[:8]}"
            digest, image_id = push_layout(ref, architecture)
            record = built(cell, image_id)
            image = record.image.model_copy(update={"ref": ref, "id": image_id, "repository": self.source,
                                                    "digest": digest})   # its labels: the cell's build
        self.builds[cell_id] = record.model_copy(update={"image": image})
        save(self.builds[cell_id], self.tmp / "collected" / f"build-{self.jobs}" / "results.json", self.loaded)
        self.jobs += 1
        return str(image.digest)

    def verify(self, cell_id: str, arch: str) -> Path:
        """The GPU job of `arch` for the cell's staged digest: its record and signed verdict."""
        found = gpu_job(self.builds[cell_id], arch)
        self.jobs += 1
        path = save(found, self.tmp / "collected" / f"verify-{self.jobs}-{arch}" / "results.json", self.loaded)
        verdicts.sign_verdicts(found, path.parent, image=str(found.image.subject), matrix=self.matrix_path,
                               probe="0" * 64, env=ENV)
        return path

    def both_verified(self) -> tuple[str, str]:
        """Staged amd64 and arm64 images, verified on B200 and RTX PRO 6000 (amd64) and GB200 (arm64): the digests."""
        amd64, arm64 = self.stage(AMD64), self.stage(ARM64)
        self.verify(AMD64, "sm_100")
        self.verify(AMD64, "sm_120")
        self.verify(ARM64, "sm_100")
        return amd64, arm64

    def promote(self, *extra: str) -> int:
        ws = Workspace.at(ROOT, matrix=self.matrix_path, runs=self.tmp / "runs")
        argv = ["--matrix", str(self.matrix_path), "--registry", self.url,
                "--results", str(self.tmp / "collected/*/results.json"), *extra]
        return call(promote_command, argv, ws, {**ENV, writer_lock.LOCK_DIR_ENV: str(self.tmp / "locks")})

    def clear(self) -> None:
        """Forget the results promoted so far: the next promotion starts from new staging builds."""
        subprocess.run(["rm", "-rf", str(self.tmp / "collected")], check=True)

    def raw(self, tag: str) -> dict[str, object]:
        done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{self.dest}:{tag}"],
                              capture_output=True, text=True, check=True)
        return dict(json.loads(done.stdout))

    def entries(self, tag: str) -> dict[str, str] | str:
        """{os/architecture: digest} of the index `tag` serves, or the digest of the manifest it serves."""
        found = self.raw(tag)
        if "manifests" not in found:
            return skopeo_digest(f"{self.dest}:{tag}")
        listed = found["manifests"]
        assert isinstance(listed, list)
        return {f"{e['platform']['os']}/{e['platform']['architecture']}": e["digest"] for e in listed}

    def seen(self, tag: str, platform: str) -> str:
        """The architecture and layers of the image `skopeo` picks under `tag` (`:TAG` or `@DIGEST`) on `platform`."""
        where = tag if tag.startswith("@") else f":{tag}"
        done = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--override-arch", platform.split("/")[1],
                               "--format", "{{.Architecture}} {{.Layers}}", f"docker://{self.dest}{where}"],
                              capture_output=True, text=True, check=True)
        assert done.stdout.startswith(platform.split("/")[1] + " ")
        return done.stdout

    def check(self, tag: str, platform: str) -> int:
        ws = Workspace.at(ROOT, matrix=self.matrix_path, runs=self.tmp / "runs")
        try:
            return call(check_command, [f"{self.dest}:{tag}", "--platform", platform], ws, ENV)
        except NotVerified:
            return 1


@pytest.fixture
def world(client: docker.DockerClient, server: RegistryServer, tmp_path: Path,
          tiny: Callable[[], str]) -> Platforms:
    needs.tool("skopeo")
    needs.tool("cosign")
    return Platforms(client, server, tmp_path, tiny)


def test_one_tag_names_each_platforms_verified_manifest(world: Platforms) -> None:
    amd64, arm64 = world.both_verified()   # arm64 on a GB200: with no arm64 runner labels, one arch is enough
    assert world.promote() == 0
    both = {"linux/amd64": amd64, "linux/arm64": arm64}
    assert world.entries(FREE) == both
    assert world.entries(SM100) == both
    assert world.entries(SM120) == amd64      # one platform holds it: the manifest itself, no index
    # Docker manifests and an OCI one: an OCI index, each entry with its own media type
    assert world.raw(FREE)["mediaType"] == "application/vnd.oci.image.index.v1+json"
    for platform, digest in both.items():   # what an engine of each platform pulls: that platform's image
        assert world.seen(FREE, platform) == world.seen(f"@{digest}", platform)
        assert world.check(FREE, platform) == 0   # each platform's verdict, read off its own entry
    assert world.promote() == 0          # again: the same index, byte for byte
    assert world.entries(FREE) == both


def test_a_platform_promoted_later_joins_the_other_kept_by_its_verdict(world: Platforms) -> None:
    amd64 = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    world.verify(AMD64, "sm_120")
    assert world.promote() == 0
    assert world.entries(FREE) == amd64
    assert world.check(FREE, "linux/arm64") == 1     # no arm64 image under the tag yet
    world.clear()
    arm64 = world.stage(ARM64)
    world.verify(ARM64, "sm_100")
    assert world.promote() == 0   # the arm64 cell's results alone: the amd64 manifest stays, by its verdict
    assert world.entries(FREE) == {"linux/amd64": amd64, "linux/arm64": arm64}
    world.clear()
    newer = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    world.verify(AMD64, "sm_120")
    assert world.promote() == 0
    assert world.entries(FREE) == {"linux/amd64": newer, "linux/arm64": arm64}
    assert world.entries(SM120) == newer


def test_an_entry_nobody_vouched_for_is_refused_then_dropped_on_request(world: Platforms) -> None:
    amd64, arm64 = world.both_verified()
    assert world.promote() == 0
    world.clear()
    # A registry writer lists an unverified arm64 image under the tag, beside the verified amd64 one.
    rogue, _ = push_layout(f"{world.dest}:rogue", "arm64")
    listed: list[dict[str, Any]] = world.raw(FREE)["manifests"]  # type: ignore[assignment]
    size = len(manifests.raw(f"{world.dest}@{rogue}", ENV))
    tampered = json.dumps({"schemaVersion": 2, "mediaType": platformtags.OCI_INDEX, "manifests": [
        e if e["platform"]["architecture"] == "amd64" else {**e, "digest": rogue, "size": size}
        for e in listed]}).encode()
    manifests.write_index(f"{world.dest}:{FREE}", tampered, ENV)
    newer = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    world.verify(AMD64, "sm_120")
    with pytest.raises(RegistryError, match=f"linux/arm64/v8: {rogue}.*carries no verdict of a trusted key: "
                                            "someone other than a promotion moved it"):
        world.promote()
    assert world.entries(FREE) == {"linux/amd64": amd64, "linux/arm64": rogue}   # nothing written
    assert world.promote("--repair") == 0
    assert world.entries(FREE) == newer      # the unvouched entry dropped: amd64's manifest alone
    assert world.entries(SM100) == {"linux/amd64": newer, "linux/arm64": arm64}   # untouched by the tamper


def test_a_record_of_one_platforms_cell_naming_another_platforms_image_moves_no_tag(world: Platforms) -> None:
    world.stage(ARM64, architecture="amd64")   # the arm64 cell's record, an amd64 image's digest
    world.verify(ARM64, "sm_100")
    with pytest.raises(RegistryError, match=r"is a linux/arm64 cell, but \S+ is a linux/amd64 image"):
        world.promote()
    assert manifests.tags(world.dest, ENV) == []


def test_a_verdict_of_the_other_platforms_cell_does_not_keep_an_entry(world: Platforms) -> None:
    """The amd64 cell's verified image listed as the arm64 entry (or the reverse) is not an earlier promotion of
    the arm64 cell, whose verdict alone can keep an arm64 entry."""
    amd64 = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    world.verify(AMD64, "sm_120")
    assert world.promote() == 0
    world.clear()
    size = len(manifests.raw(f"{world.dest}@{amd64}", ENV))
    entry = {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": amd64, "size": size}
    mislabelled = json.dumps({"schemaVersion": 2, "mediaType": platformtags.DOCKER_LIST, "manifests": [
        {**entry, "platform": {"os": "linux", "architecture": a}} for a in ("amd64", "arm64")]}).encode()
    manifests.write_index(f"{world.dest}:{FREE}", mislabelled, ENV)
    arm64 = world.stage(ARM64)
    world.verify(ARM64, "sm_100")
    with pytest.raises(RegistryError, match=f"none for {re.escape(ARM64)}"):
        world.promote()
    assert world.promote("--repair") == 0
    assert world.entries(FREE) == {"linux/amd64": amd64, "linux/arm64": arm64}


def test_verdicts_stay_per_platform_manifest(world: Platforms) -> None:
    """The index a tag becomes carries no verdict of its own: each platform's are on its manifest."""
    amd64, arm64 = world.both_verified()
    assert world.promote() == 0
    from buildscripts.trust import attached, cosign, snapshot
    trusted = [keys.signing_key(ENV).public]
    downloaded = {d: cosign.download(f"{world.dest}@{d}", ENV) for d in (amd64, arm64)}
    cells = {d: {verdicts.open_verdict(e, trusted).cell for e in found if not snapshot.is_snapshot(e)}
             for d, found in downloaded.items()}
    assert cells == {amd64: {AMD64}, arm64: {ARM64}}
    # and each manifest its own snapshot of them, the index none
    assert {d: [s.digest for s in attached.read(found, d, trusted).snapshots] for d, found in downloaded.items()} == \
        {amd64: [amd64], arm64: [arm64]}
