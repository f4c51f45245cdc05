"""An image's signed SBOM and provenance travel with its OCI archive (`nox -s export`): `check oci-archive:PATH
--sbom` verifies them against the manifest the archive holds, as it does in the registry; one for another digest
attached beside them is not carried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildscripts.attest import signed
from buildscripts.trust import carried, described, keys
from tests.attest_world import World, attach_directly, export_one, fixtures, promote_one
from tests.process.test_described_attached import signed_files
from tests.process.test_policy_agreement import Registry
from tests.registry_writer import RegistryWriter
from tests.sbom_tree import PIP_CELL, make_tree

pytestmark = pytest.mark.registry
world, promoted, archive = fixtures("described-archive")


def test_the_sbom_and_provenance_travel_with_the_archive(world: World, tmp_path: Path) -> None:
    digest, _ = promote_one(world)
    key = keys.signing_key(world.verifier_env)
    registry = Registry(world.server, RegistryWriter(world.server.url), world.folder, key, world.verifier_pub,
                        name=world.name)
    signed.attach(signed_files(registry, digest, make_tree(tmp_path / "tree")), world.ref(digest),
                  trusted=world.trusted())
    elsewhere, _ = signed_files(registry, "sha256:" + "9" * 64, make_tree(tmp_path / "other"))
    attach_directly(world, json.loads(elsewhere.read_text()), digest)
    made = export_one(world, digest)
    kinds = [described.claimed_type(e) for e in json.loads(carried.sidecar(made).read_text())["attestations"]]
    assert sorted(k for k in kinds if k) == sorted([described.SBOM, described.PROVENANCE])   # not the other digest's
    done = world.check(f"oci-archive:{made}", "--sbom")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SBOM: ✓ verified" in done.stdout and "provenance: ✓ verified" in done.stdout
    assert f"cell {PIP_CELL}" in done.stdout
