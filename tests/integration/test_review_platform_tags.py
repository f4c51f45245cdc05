"""Attacks a review of "one good tag for both platforms" found open (ca25f32), kept as regressions: a
registry writer who can push manifests, indexes and tags, and copy around verdicts the trusted key signed for
other images.

Each test asserts what must hold; each failed on ca25f32, before its mend. Against a real registry on
loopback, skopeo and cosign, with the fixtures of tests/integration/test_promote_platforms.py and
test_promote.py. No hand-written index or manifest is ever pulled by the Docker engine (only skopeo and the
project's code read them).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from buildscripts.errors import RegistryError
from buildscripts.matrix.schema import Tags
from buildscripts.publish import platformtags, promotion
from buildscripts.registry import manifests
from buildscripts.trust import verdicts
from tests import needs
from tests.digest_records import GPUS, gpu_job, save
from tests.integration.test_promote import DEFAULT, KEYS, cfg, make_image, save_run, verified  # noqa: F401  (fixtures)
from tests.integration.test_promote_platforms import AMD64, ARM64, FREE, SM100, Platforms, push_layout
from tests.registry_server import RegistryServer
from tests.results_factory import server_fails

pytestmark = pytest.mark.registry
ENV = dict(os.environ)


@pytest.fixture
def world(client: docker.DockerClient, server: RegistryServer, tmp_path: Path, tiny: Callable[[], str]) -> Platforms:
    needs.tool("skopeo")
    needs.tool("cosign")
    return Platforms(client, server, tmp_path, tiny)


def verify_failing(world: Platforms, cell_id: str, arch: str) -> Path:
    """The GPU job of `arch` for the cell's staged digest, whose server died there: a signed FAILED verdict."""
    found = gpu_job(world.builds[cell_id], arch, stages=server_fails(GPUS[arch], arch))
    world.jobs += 1
    path = save(found, world.tmp / "collected" / f"verify-{world.jobs}-{arch}" / "results.json", world.loaded)
    verdicts.sign_verdicts(found, path.parent, image=str(found.image.subject), matrix=world.matrix_path,
                           probe="0" * 64, env=ENV)
    return path


def write_index(world: Platforms, tag: str, entries: list[tuple[dict[str, str] | None, str]]) -> str:
    """A registry writer's index at `tag`: (platform or None, manifest digest) per entry."""
    listed = []
    for platform, digest in entries:
        raw = manifests.raw(f"{world.dest}@{digest}", ENV)
        entry: dict[str, object] = {"mediaType": json.loads(raw).get("mediaType") or platformtags.OCI_MANIFEST,
                                    "digest": digest, "size": len(raw)}
        if platform is not None:
            entry["platform"] = platform
        listed.append(entry)
    data = {"schemaVersion": 2, "mediaType": platformtags.OCI_INDEX, "manifests": listed}
    return manifests.write_index(f"{world.dest}:{tag}", json.dumps(data).encode(), ENV)


# ------------------------------------------------------------------ 1. arch-free tag laundering (HIGH)


@pytest.mark.parametrize("sm120", ["failed", "never ran"])
def test_an_image_that_did_not_earn_the_arch_free_tag_is_never_written_into_it(world: Platforms, sm120: str) -> None:
    """The amd64 image X passed on sm_100 but its sm_120 job failed (or never ran): its promotion withholds the
    arch-free tag. A registry writer points the arch-free tag at X. The arm64 cell's promotion must not write an
    index that lists X as the amd64 image of the arch-free tag: X never earned it. On ca25f32 it keeps X
    ("vouched" by X's sm_100 verdict: for an arch-free tag any one passing arch of the cell counts, and a
    FAILED verdict of another arch is ignored), and so republishes the tamper with the promotion's authority."""
    x = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    if sm120 == "failed":
        verify_failing(world, AMD64, "sm_120")
    assert world.promote() == 0
    assert FREE not in manifests.tags(world.dest, ENV)        # withheld, as it must be
    assert world.entries(SM100) == x
    world.clear()
    manifests.copy(f"{world.dest}@{x}", f"{world.dest}:{FREE}", ENV)   # the tamper: one registry write
    arm64 = world.stage(ARM64)
    world.verify(ARM64, "sm_100")
    with contextlib.suppress(RegistryError):   # refusing the tamper is fine
        world.promote()
    served = world.entries(FREE)
    assert not (isinstance(served, dict) and served.get("linux/amd64") == x), (
        f"promotion wrote {FREE} as an index of {served}: amd64 entry {x} never earned the arch-free tag "
        f"(sm_120 {sm120})")
    assert arm64


# ------------------------------------------------------------------ 2. check --platform trusts index labels (MEDIUM)


@pytest.mark.parametrize("label", [{"os": "linux", "architecture": "arm64"}, None],
                         ids=["labelled-arm64", "naming-no-platform"])
def test_check_platform_arm64_fails_for_an_amd64_image_listed_as_arm64(world: Platforms,
                                                                      label: dict[str, str] | None) -> None:
    """Only an amd64 image was ever verified. A registry writer lists it in an index under the good tag as the
    linux/arm64 entry (or as an entry naming no platform). `check TAG --platform linux/arm64` must not say
    verified: nothing ran on arm64 (the commit makes a single manifest's platform come from its config for
    exactly this reason, but an index entry's label is still taken on trust). An arm64 engine pulls that entry:
    the amd64 image, run under emulation where binfmt is installed, never verified there."""
    amd64 = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    world.verify(AMD64, "sm_120")
    assert world.promote() == 0
    assert world.check(FREE, "linux/arm64") == 1     # the single amd64 manifest: refused, right
    write_index(world, FREE, [(label, amd64)])
    assert world.check(FREE, "linux/arm64") == 1, "check --platform linux/arm64 passed an amd64-only image"


# ------------------------------------------------------------------ 3. engine push over an arm64 OCI manifest (MEDIUM)


def test_a_push_from_the_engine_never_replaces_a_tag_holding_an_arm64_oci_manifest(
    client: docker.DockerClient, cfg: Tags, make_image: Callable[[str], str],  # noqa: F811
    server: RegistryServer, tmp_path: Path,
) -> None:
    """The arm64 cell alone earned the tag, so promotion by digest made it that cell's manifest itself: an OCI
    manifest, as a native arm64 build pushes it. An amd64 cell promoted from the engine must be refused (the
    docs: "never onto a tag that holds another platform's image"). `_refuse_other_platforms` reads the
    platform from Docker's distribution inspect, whose `Platforms` Docker 20.10 leaves null for an OCI
    manifest: nothing is refused and the verified arm64 image is replaced."""
    cell = verified(client, make_image(f"review {uuid.uuid4()}"), cfg)
    base = f"{server.url}/{cfg.repository}"
    tag = cell.tags[0].rsplit(":", 1)[1]
    arm64, _ = push_layout(f"{base}:{tag}", "arm64")
    with contextlib.suppress(RegistryError):
        promotion.promote_file(client, save_run(cell, tmp_path / "a" / "results.json"), server.url, cfg, DEFAULT, KEYS)
    assert manifests.served(f"{base}:{tag}", ENV).digest == arm64, "the engine push replaced the arm64 image"


# ------------------------------------------------------------------ 4. --repair drops a vouched entry (LOW)


def test_repair_keeps_a_vouched_entry_that_a_writer_listed_twice(world: Platforms) -> None:
    """A registry writer lists the verified arm64 manifest twice (as linux/arm64 and linux/arm64/v8). Promotion
    refuses, and its hint says `--repair` "points it at the verified digests again (dropping what no verdict
    vouches for)". The arm64 manifest is vouched for by its own cell's verdict and must stay; on ca25f32
    --repair drops both entries, and arm64 machines lose the good tag to one registry write."""
    amd64, arm64 = world.both_verified()
    assert world.promote() == 0
    world.clear()
    write_index(world, FREE, [({"os": "linux", "architecture": "amd64"}, amd64),
                              ({"os": "linux", "architecture": "arm64"}, arm64),
                              ({"os": "linux", "architecture": "arm64", "variant": "v8"}, arm64)])
    newer = world.stage(AMD64)
    world.verify(AMD64, "sm_100")
    world.verify(AMD64, "sm_120")
    with pytest.raises(RegistryError, match="lists 2 manifests"):
        world.promote()
    assert world.promote("--repair") == 0
    assert world.entries(FREE) == {"linux/amd64": newer, "linux/arm64": arm64}
